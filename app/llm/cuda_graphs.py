"""Forward passes replayed from captured CUDA graphs over a few bucketed shapes (issue 27).

On a GPU a 135M-class model is launch-bound: an eager pass launches ~1,500 small kernels
and the CPU's dispatch, not the GPU, sets its time (docs/models.md). A CUDA graph records
the kernels of one pass once and replays them with one launch. Graphs need static shapes
and addresses, so a scoring pass is padded to a *bucket* (rows x length, from
``GraphOptions.rows`` x ``GraphOptions.lengths``) and run cache-free: token ids, position
ids and segments (passes.segment_mask) are padded on the host and copied into the bucket's
static buffers, the graph is replayed, and the real rows and positions of the static output
are returned. The 4D attention mask is built from the segments inside the graph (the same ops
as eagerly, so the same mask): around a replay there are three copies, not the ~30 small
kernels of padding on the device and building the mask eagerly (issue 27). Padding rows hold
one real pad token (never an all-masked query row: NaN) and padding positions are masked as
keys, so the real rows' numbers are those of an eager pass over the same tokens, up to the
kernels' float rounding for that shape.

Only scoring passes whose cache is not needed afterwards use it (``keep_cache=False`` in
``HFLanguageModel._forward``): the single-token fast path and the one-pass continuation
scoring. A shape with no captured bucket, or any pass on a CPU, runs eagerly.

Strategies (``options["cuda_graphs"]``, chosen by measurement: benchmarks/gpu_check.py):
"graph" (explicit ``torch.cuda.CUDAGraph`` capture, one memory pool for all buckets),
"compile" (``torch.compile(mode="reduce-overhead")`` per bucket: the same replay plus fused
kernels, but a compile per shape), "off". "auto" (the default) is "graph" on CUDA and
"off" elsewhere. Buckets are captured at start-up, smallest first, within ``warmup_s``
seconds (logged); a bucket not captured in time stays eager. The first capture is checked
against an eager pass of the same padded inputs; a mismatch turns graphs off (logged).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from .passes import attention_mask_4d

log = logging.getLogger(__name__)

STRATEGIES = ("auto", "off", "graph", "compile")


@dataclass(frozen=True)
class GraphOptions:
    mode: str = "auto"
    rows: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)
    lengths: tuple[int, ...] = (32, 64, 96, 128, 160, 192, 256, 384, 512)
    max_tokens: int = 32768  # rows x length of the largest bucket (memory of the shared pool)
    warmup_s: float = 60.0

    @classmethod
    def from_options(cls, opts: dict[str, Any]) -> GraphOptions:
        raw = opts.get("cuda_graphs", "auto")
        o: dict[str, Any] = {"mode": raw} if isinstance(raw, str) else dict(raw or {})
        unknown = set(o) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"options.cuda_graphs: unknown keys {sorted(unknown)}")
        for k in ("rows", "lengths"):
            if k in o:
                o[k] = tuple(sorted({int(x) for x in o[k]}))
        out = cls(**o)
        if out.mode not in STRATEGIES:
            raise ValueError(f"options.cuda_graphs must be one of {', '.join(STRATEGIES)}")
        if not out.rows or not out.lengths or min(out.rows) < 1 or min(out.lengths) < 1 or out.max_tokens < 1:
            raise ValueError("options.cuda_graphs: rows, lengths and max_tokens must be positive")
        if out.warmup_s < 0:
            raise ValueError("options.cuda_graphs: warmup_s must be >= 0")
        return out

    def strategy(self, device: torch.device) -> str:
        """"graph", "compile" or "off" for this device (graphs are a CUDA feature)."""
        if device.type != "cuda" or self.mode == "off":
            return "off"
        return "graph" if self.mode == "auto" else self.mode

    def buckets(self) -> list[tuple[int, int]]:
        """(rows, length) shapes within ``max_tokens``, smallest first (the capture order)."""
        shapes = [(b, s) for b in self.rows for s in self.lengths if b * s <= self.max_tokens]
        return sorted(shapes, key=lambda bs: (bs[0] * bs[1], bs[0]))


def pick_bucket(buckets: list[tuple[int, int]], n: int, s: int) -> tuple[int, int] | None:
    """The cheapest (fewest padded tokens) bucket holding n rows of s tokens, or None."""
    fitting = [(b, t) for b, t in buckets if b >= n and t >= s]
    return min(fitting, key=lambda bs: (bs[0] * bs[1], bs[0]), default=None)


def pad_to_bucket(ids: torch.Tensor, pos: torch.Tensor, seg: torch.Tensor, rows: int, length: int,
                  pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """ids, position ids and segments (n, s) padded to (rows, length); a padding row is one real pad
    token (segment 0 at position 0) so that no query row is fully masked."""
    n, s = ids.shape
    ids_b = torch.full((rows, length), pad_id, dtype=ids.dtype, device=ids.device)
    pos_b = torch.zeros((rows, length), dtype=pos.dtype, device=ids.device)
    seg_b = torch.full((rows, length), -1, dtype=seg.dtype, device=ids.device)
    ids_b[:n, :s], pos_b[:n, :s], seg_b[:n, :s] = ids, pos, seg
    seg_b[n:, 0] = 0
    return ids_b, pos_b, seg_b


@dataclass
class _Bucket:
    ids: torch.Tensor
    pos: torch.Tensor
    seg: torch.Tensor  # the mask is built from it inside the graph (_forward_seg)
    out: torch.Tensor | None = None
    graph: Any = None  # torch.cuda.CUDAGraph ("graph")
    fn: Callable[..., torch.Tensor] | None = None  # the compiled forward ("compile")


@dataclass
class GraphForward:
    """Bucketed cache-free forward passes of one decoder stack (see module doc).

    ``base(input_ids, attention_mask, position_ids)`` is the decoder without the LM head.
    With ``capture=False`` :meth:`run` pads to a bucket and runs eagerly: the padding and
    masking logic, testable on a CPU.
    """

    base: Any
    device: torch.device
    pad_id: int
    opts: GraphOptions
    capture: bool = True
    attn_impl: str = "sdpa"  # "eager" attention takes an additive float mask, the others a boolean one
    dtype: torch.dtype = torch.float32
    buckets: dict[tuple[int, int], _Bucket] = field(default_factory=dict)
    last_padded_tokens: int = 0
    warm_report: dict[str, Any] = field(default_factory=dict)
    _pool: Any = None

    @property
    def strategy(self) -> str:
        return self.opts.strategy(self.device) if self.capture else "padded-eager"

    def _mask(self, seg: torch.Tensor) -> torch.Tensor:
        empty = torch.zeros((seg.shape[0], 0), dtype=torch.long, device=seg.device)
        return attention_mask_4d(empty, seg, self.attn_impl, self.dtype)

    def _eager(self, ids: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        out = self.base(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False)
        hidden: torch.Tensor = out.last_hidden_state
        return hidden

    def _forward_seg(self, ids: torch.Tensor, pos: torch.Tensor, seg: torch.Tensor) -> torch.Tensor:
        """The pass a bucket captures: the mask from the segments, then the decoder."""
        return self._eager(ids, pos, self._mask(seg))

    def max_rows(self, s: int) -> int:
        """The most rows of s tokens that one ready bucket holds (0: none)."""
        shapes = self.opts.buckets() if not self.capture else self.buckets
        return max((b for b, t in shapes if t >= s), default=0)

    def fits(self, n: int, s: int) -> bool:
        """Whether n rows of s tokens have a ready bucket (else the caller runs eagerly)."""
        return n <= self.max_rows(s)

    def run(self, ids: torch.Tensor, pos: torch.Tensor, seg: torch.Tensor) -> torch.Tensor | None:
        """Hidden states (n, s, H), on this object's device, of ids/pos/seg (n, s) through the smallest
        fitting bucket; None: no bucket. The inputs may be on the host (a scoring pass's are): they are
        padded there and copied once into the bucket."""
        n, s = ids.shape
        shape = pick_bucket(self.opts.buckets() if not self.capture else list(self.buckets), n, s)
        if shape is None:
            return None
        ids_b, pos_b, seg_b = pad_to_bucket(ids, pos, seg, shape[0], shape[1], self.pad_id)
        self.last_padded_tokens = shape[0] * shape[1]
        with torch.inference_mode():
            if not self.capture:
                dev = self.device
                return self._forward_seg(ids_b.to(dev), pos_b.to(dev), seg_b.to(dev))[:n, :s]
            bucket = self.buckets[shape]
            bucket.ids.copy_(ids_b)
            bucket.pos.copy_(pos_b)
            bucket.seg.copy_(seg_b)
            if bucket.graph is not None:
                bucket.graph.replay()
                assert bucket.out is not None
                out = bucket.out
            else:
                assert bucket.fn is not None
                out = bucket.fn(bucket.ids, bucket.seg, bucket.pos)
            return out[:n, :s].clone()  # the static buffer is overwritten by the next replay

    # ----------------------------------------------------------- capture

    def _capture(self, shape: tuple[int, int]) -> _Bucket:
        rows, length = shape
        ids = torch.full((rows, length), self.pad_id, dtype=torch.long, device=self.device)
        pos = torch.arange(length, device=self.device).expand(rows, length).contiguous()
        seg = torch.zeros((rows, length), dtype=torch.long, device=self.device)
        bucket = _Bucket(ids, pos, seg)
        if self.strategy == "compile":
            fn = torch.compile(lambda i, sg, p: self._forward_seg(i, p, sg), mode="reduce-overhead", dynamic=False)
            for _ in range(3):  # compile, then record the cudagraph tree
                fn(bucket.ids, bucket.seg, bucket.pos)
            bucket.fn = fn
            return bucket
        side = torch.cuda.Stream(self.device)  # type: ignore[no-untyped-call]
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):  # warm the kernels (and cuBLAS workspaces) outside the capture
            for _ in range(2):
                self._forward_seg(bucket.ids, bucket.pos, bucket.seg)
        torch.cuda.current_stream(self.device).wait_stream(side)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            bucket.out = self._forward_seg(bucket.ids, bucket.pos, bucket.seg)
        bucket.graph = graph
        return bucket

    def warm(self, check: Callable[[torch.Tensor, torch.Tensor], bool] | None = None) -> dict[str, Any]:
        """Capture the buckets, smallest first, within ``warmup_s`` (see module doc); returns a report."""
        report: dict[str, Any] = {"strategy": self.strategy, "captured": [], "skipped": 0, "seconds": 0.0}
        if self.strategy in ("off", "padded-eager"):
            self.warm_report = report
            return report
        t0 = time.perf_counter()
        shapes = self.opts.buckets()
        with torch.inference_mode():
            for i, shape in enumerate(shapes):
                if time.perf_counter() - t0 > self.opts.warmup_s:
                    report["skipped"] = len(shapes) - i
                    break
                try:
                    bucket = self._capture(shape)
                except Exception:  # a model whose forward cannot be captured: eager everywhere
                    log.exception("CUDA graph capture of bucket %s failed; forward passes stay eager", shape)
                    self.buckets.clear()
                    report["error"] = "capture failed"
                    break
                self.buckets[shape] = bucket
                report["captured"].append(list(shape))
                if i == 0 and not self._self_check(shape, check):
                    log.warning("CUDA graph replay differs from eager on bucket %s; forward passes stay eager", shape)
                    self.buckets.clear()
                    report["error"] = "replay differs from eager"
                    report["captured"] = []
                    break
        report["seconds"] = round(time.perf_counter() - t0, 3)
        log.info("CUDA graphs (%s): %d buckets captured in %.1f s, %d left eager (warm-up limit %.0f s)",
                 report["strategy"], len(report["captured"]), report["seconds"], report["skipped"],
                 self.opts.warmup_s)
        self.warm_report = report
        return report

    def _self_check(self, shape: tuple[int, int], check: Callable[[torch.Tensor, torch.Tensor], bool] | None) -> bool:
        """Replay vs eager on varied real inputs of ``shape`` (rows of different lengths)."""
        rows, length = shape
        gen = torch.Generator(device="cpu").manual_seed(0)
        ids = torch.randint(0, 1000, (rows, length), generator=gen).to(self.device)
        lens = torch.randint(1, length + 1, (rows,), generator=gen).to(self.device)
        ar = torch.arange(length, device=self.device)
        seg = torch.where(ar[None, :] < lens[:, None], 0, -1)
        pos = ar.expand(rows, length)
        got = self.run(ids, pos, seg)
        want = self._eager(ids, pos, self._mask(seg))
        keep = (seg >= 0)[..., None]
        assert got is not None
        got, want = got * keep, want * keep
        if check is not None:
            return check(got, want)
        scale = float(want.abs().max()) or 1.0
        return float((got.float() - want.float()).abs().max()) <= 2e-2 * scale
