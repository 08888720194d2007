"""docs/security.md matches the code: its route table is app/api/access.py's (issue 26)."""

from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"


def _section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start: end if end != -1 else len(text)]


def test_who_may_call_what_is_the_access_table():
    from app.api.access import markdown_table

    assert markdown_table() in _section(DOC.read_text(), "Who may call what"), \
        "docs/security.md's route table differs from app.api.access.markdown_table(): paste it again"
