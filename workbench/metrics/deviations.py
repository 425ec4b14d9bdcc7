"""Where a run departed from its plan, in a few words: what failed and why, outputs short
of ``max_tokens``, prompts the server counted otherwise than sent; the summary's
``failures``, ``output_short`` and ``prompt_counted``, and the headline's parts of them
(docs/metrics.md, "Headline")."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from workbench.error_answers import answer_message

if TYPE_CHECKING:
    from workbench.metrics.columns import Columns

#: the classes kept in the summary (most requests first)
KEPT_CLASSES = 3
#: a sample reason is cut here
SAMPLE_CHARS = 120
#: how far a failed stream got (``backends.transport``'s "after N token events"): left out
#: of its class, kept in its sample
_PROGRESS = re.compile(r" after \d+ token events?\b")


def failure_class(error: Any, http_status: int | None) -> str:
    """``"HTTP 400"`` for an answer the server refused, else the error's name or rule
    (the text before its first ``": "``, ``"stream idle timeout"``, ``"cannot connect to
    http://127.0.0.1:8000"``), without how far the stream got (``"server disconnected
    mid-stream"``: one class however many token events each got)."""
    if http_status is not None and http_status != 200:
        return f"HTTP {http_status}"
    text = _PROGRESS.sub("", " ".join(str(error or "").split()))
    head = text.split(": ", 1)[0].strip()
    return head if head and len(head) <= 60 else " ".join(text.split()[:4]) or "(no message)"


def reason(error: Any) -> str:
    """The error in words, a server's JSON answer reduced to its message
    (``error_answers.answer_message``), cut at ``SAMPLE_CHARS``."""
    text = str(error or "(no message)")
    head, sep, body = text.partition(": ")
    if sep and head.startswith("HTTP ") and body.lstrip().startswith("{"):
        try:  # the JSON answer, and whatever the transport added after it
            doc = json.JSONDecoder().raw_decode(body.lstrip())[0]
        except ValueError:
            doc = None
        text = answer_message(doc) or text
    text = " ".join(text.split())
    return text if len(text) <= SAMPLE_CHARS else text[: SAMPLE_CHARS - 1] + "…"


def sample(error: Any, cls: str) -> str:
    """What a table's sample message of class ``cls`` says: ``reason`` beyond its class
    (``beyond_class``), so a row never repeats its class in its sample."""
    return beyond_class(reason(error), cls)


def failures(df: Columns) -> dict[str, Any] | None:
    """The requests that ended in error, by class, with one reason each (most first);
    None when none did (the summary then has no ``failures`` key)."""
    bad = df.where(df.equals("status", "error"))
    if not len(bad):
        return None
    has_codes = bad.has("http_status")
    codes, valid = bad.ints("http_status") if has_codes else (None, None)
    classes: dict[str, dict[str, Any]] = {}
    for i, error in enumerate(bad.texts("error")):
        code = int(codes[i]) if codes is not None and valid is not None and valid[i] else None
        key = failure_class(error, code)
        row = classes.setdefault(key, {"class": key, "requests": 0, "reason": reason(error)})
        row["requests"] += 1
    ranked = sorted(classes.values(), key=lambda r: -r["requests"])
    return {"requests": len(bad), "classes": ranked[:KEPT_CLASSES]}


def beyond_class(sample: str, cls: str) -> str:
    """What a class's sample reason says beyond the class: ``"after 3 token events:
    connection closed"`` for ``"server disconnected mid-stream after 3 token events:
    connection closed"``, ``""`` when the two are the same; the whole reason when it does
    not start with its class (a server's answer to ``HTTP 400``)."""
    rest = sample.removeprefix(cls)
    if rest == sample or (rest and cls and rest[0].isalnum() and cls[-1].isalnum()):
        return sample  # not the class, or the class is only part of its first word
    return rest.lstrip(": ")


def _class_part(row: Mapping[str, Any]) -> str:
    adds = beyond_class(str(row["reason"]), str(row["class"]))
    return f"{row['class']} ×{row['requests']}" + (f" ({adds})" if adds else "")


def failures_part(summary: Mapping[str, Any]) -> str | None:
    """``"53 failed: HTTP 400 ×53 (This model's maximum context length is 8192 tokens…)"``,
    ``"server disconnected mid-stream ×10 (after 3 token events: connection closed)"``;
    the two largest classes, each with what its sample reason adds to it, and how many
    more."""
    f = summary.get("failures")
    if not isinstance(f, Mapping) or not f.get("requests"):
        return None
    classes = list(f.get("classes") or [])
    shown = "; ".join(_class_part(c) for c in classes[:2])
    rest = int(f["requests"]) - sum(int(c["requests"]) for c in classes[:2])
    more = f"; {rest} other" if rest > 0 else ""
    return f"{f['requests']} failed: {shown}{more}"


def output_short(df: Columns) -> dict[str, Any] | None:
    """The ok requests that ended with fewer output tokens than pinned (``max_tokens``):
    a server that clamped ``max_tokens`` to its context (finish ``length``) or stopped at
    an end-of-sequence token it was asked to ignore (``stop``); None when none did (the
    summary then has no ``output_short`` key)."""
    ok = df.where(df.equals("status", "ok"))
    if not len(ok) or not ok.has("completion_tokens"):
        return None
    got, known = ok.ints("completion_tokens")
    planned, _ = ok.ints("planned_output_tokens")
    short = known & (got < planned)
    if not short.any():
        return None
    reasons: dict[str, int] = {}
    for why in ok.where(short).texts("finish_reason"):
        reasons[str(why)] = reasons.get(str(why), 0) + 1
    return {"requests": int(short.sum()), "of_ok": len(ok),
            "planned_tokens": int(planned[short].sum()),
            "generated_tokens": int(got[short].sum()),
            "finish_reasons": dict(sorted(reasons.items(), key=lambda kv: -kv[1]))}


def output_short_part(summary: Mapping[str, Any]) -> str | None:
    """``"1 of 2 ok ended short of max_tokens: 192 of 300 tokens (finish length)"``; the
    finish reasons most frequent first (their counts: the summary's ``output_short``)."""
    s = summary.get("output_short")
    if not isinstance(s, Mapping) or not s.get("requests"):
        return None
    why = ", ".join(s.get("finish_reasons") or {})
    return (f"{s['requests']} of {s['of_ok']} ok ended short of max_tokens: "
            f"{s['generated_tokens']} of {s['planned_tokens']} tokens (finish {why})")


#: the server's prompt count may differ from the tokens sent by this share in all before
#: it is said (a chat template's few tokens per turn stay under it)
PROMPT_DRIFT = 0.05


def prompt_counted(df: Columns) -> dict[str, Any] | None:
    """The ok requests' prompt tokens as the server counted them (``usage.prompt_tokens``)
    against the tokens sent, when the two totals differ by more than ``PROMPT_DRIFT``: a
    server whose tokenizer reads the sent text otherwise (``openai-chat``), or that adds
    tokens of its own; None when they agree (the summary then has no key)."""
    ok = df.where(df.equals("status", "ok"))
    if not len(ok) or not ok.has("prompt_tokens") or not ok.has("sent_prompt_tokens"):
        return None
    server, known = ok.ints("prompt_tokens")
    sent, sent_known = ok.ints("sent_prompt_tokens")
    both = known & sent_known & (sent > 0)
    total_sent, total_server = int(sent[both].sum()), int(server[both].sum())
    if not total_sent or abs(total_server - total_sent) <= PROMPT_DRIFT * total_sent:
        return None
    return {"requests": int(both.sum()), "sent_tokens": total_sent,
            "server_tokens": total_server, "ratio": total_server / total_sent}


def prompt_counted_part(summary: Mapping[str, Any]) -> str | None:
    """``"the server counted 47134 prompt tokens for the 5308 sent (8.88×)"``."""
    p = summary.get("prompt_counted")
    if not isinstance(p, Mapping) or not p.get("sent_tokens"):
        return None
    return (f"the server counted {p['server_tokens']} prompt tokens for the "
            f"{p['sent_tokens']} sent ({p['ratio']:.3g}×)")
