"""In-context classification building blocks (library: no FastAPI, no SQL, no settings).

    from app.icl import load_bundled, partition_exemplars, partition_label_distribution
    ds = load_bundled()                                   # assistant_intents, 400 train / 200 test
    parts = partition_exemplars(len(ds.train), 4, 2, rng) # 4 disjoint 2-shot partitions
    probs = partition_label_distribution(lm, ds.exemplars(), parts, query, ds.labels, ds.template)

See docs/icl.md.
"""

from .baselines import BaselineResult, icl, icl_batch, zero_shot, zero_shot_batch
from .datasets import (
    HF_TASKS,
    Example,
    LabeledDataset,
    bundled_names,
    load_bundled,
    load_hf_dataset,
    load_hf_task,
)
from .partition import partition_exemplars
from .scoring import (
    CALIBRATION_EPS,
    CONTENT_FREE_INPUTS,
    ICLPrompt,
    LabelScores,
    check_labels,
    contextual_calibration,
    label_distribution,
    partition_label_distribution,
    renormalize,
    score_labels,
)
from .templates import (
    ASSISTANT_INTENTS,
    DEFAULT,
    ICLINF_AGNEWS,
    ICLINF_DBPEDIA,
    ICLINF_TREC,
    SUBJ,
    SUPPORT_INTENTS,
    TEMPLATES,
    Exemplar,
    PromptTemplate,
    as_exemplar,
    get_template,
)

__all__ = [
    "BaselineResult", "CALIBRATION_EPS", "CONTENT_FREE_INPUTS", "DEFAULT", "Example", "Exemplar", "HF_TASKS",
    "ICLINF_AGNEWS", "ICLINF_DBPEDIA", "ICLINF_TREC", "ICLPrompt", "LabelScores", "LabeledDataset",
    "PromptTemplate", "SUBJ", "ASSISTANT_INTENTS", "SUPPORT_INTENTS", "TEMPLATES", "as_exemplar", "bundled_names", "check_labels",
    "contextual_calibration", "get_template", "icl", "icl_batch", "label_distribution", "load_bundled",
    "load_hf_dataset", "load_hf_task", "partition_exemplars", "partition_label_distribution", "renormalize",
    "score_labels", "zero_shot", "zero_shot_batch",
]
