"""``dpicl audit``: submit audit jobs and gate CI on their verdict.

Exit codes of ``dpicl audit run`` (also in the README):

    0  the measured leakage is within the claim (or, without --wait, the job was accepted)
    1  the measured leakage exceeds the claim (verdict: violation)
    2  an error: bad input, the service refused or failed, the job failed or was cancelled
    3  --timeout elapsed before the job finished (the job keeps running on the server)
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

import typer

audit_app = typer.Typer(help="Audit jobs: submit, wait, CI verdicts.", no_args_is_help=True)

# 0 pass, 1 violation, 2 error, 3 timeout, 4 inconclusive (no violation seen, but the audit could
# not have seen one: too few trials or a design blind to the alternatives; see verdict_reason).
EXIT_PASS, EXIT_VIOLATION, EXIT_ERROR, EXIT_TIMEOUT, EXIT_INCONCLUSIVE = 0, 1, 2, 3, 4
TERMINAL = ("succeeded", "failed", "cancelled")


class CLIError(Exception):
    def __init__(self, message: str, code: int = EXIT_ERROR, *, job: dict | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.job = job


class Deadline:
    def __init__(self, seconds: float | None) -> None:
        self.end = None if seconds is None else time.monotonic() + seconds

    def left(self) -> float | None:
        return None if self.end is None else self.end - time.monotonic()

    def passed(self) -> bool:
        return self.end is not None and time.monotonic() >= self.end


def _without_keys(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: ("[redacted]" if k == "api_key" and v is not None else _without_keys(v)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_without_keys(v) for v in obj]
    return obj


def idempotency_key(body: dict[str, Any], run_id: str | None) -> str:
    """The request's hash (kind, config and claims), plus ``--run-id``: re-running the same CI step
    gets the same job back; a new pipeline run (a new run id) gets a new job. Target keys are left out: the
    server stores this key, and an unkeyed hash of a key is one guess away from it (the server compares keys
    by HMAC, so a changed key under the same run id is a 409, not the old job)."""
    canonical = json.dumps(_without_keys(body), sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode()).hexdigest()[:40]
    return f"ci-{digest}" + (f"-{run_id}" if run_id else "")


def _sdk(server: str, deadline: Deadline, *, max_retries: int = 8):
    """The Python client (app/client) with this run's deadline bounding every retry."""
    from app.client import Client

    return Client(server, deadline=deadline.end, max_retries=max_retries, user_agent="dpicl-audit-cli")


def _cli_error(exc: Exception, deadline: Deadline, what: str, *, job: dict | None = None) -> CLIError:
    """A DpiclError as the CLI reports it: no answer before the deadline is a timeout (exit 3)."""
    from app.client import Unavailable

    if isinstance(exc, Unavailable):
        if deadline.passed():
            return CLIError(f"timed out ({exc})", EXIT_TIMEOUT, job=job)
        return CLIError(str(exc), job=job)
    return CLIError(f"{what}: {exc}", job=job)


class Progress:
    """A bar on a terminal; plain lines (on change) otherwise."""

    def __init__(self, stream, enabled: bool = True) -> None:
        self.stream = stream
        self.tty = enabled and hasattr(stream, "isatty") and stream.isatty()
        self.enabled = enabled
        self.last: tuple | None = None

    def show(self, job: dict) -> None:
        if not self.enabled:
            return
        frac = float(job["progress"]["fraction"] or 0.0)
        msg = job["progress"]["message"] or ""
        status = job["status"]
        if self.tty:
            width = 30
            filled = int(round(frac * width))
            line = f"\r[{'#' * filled}{'.' * (width - filled)}] {frac * 100:5.1f}% {status}: {msg}"[:120]
            self.stream.write(line.ljust(120))
            self.stream.flush()
            return
        key = (status, msg, int(frac * 10))
        if key != self.last:
            self.last = key
            self.stream.write(f"{status} {frac * 100:.0f}% {msg}\n")
            self.stream.flush()

    def done(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()


def _load_body(config: Path, kind: str | None) -> dict[str, Any]:
    try:
        text = sys.stdin.read() if str(config) == "-" else config.read_text()
    except OSError as exc:
        raise CLIError(f"cannot read --config {config}: {exc.strerror or exc}")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CLIError(f"--config {config} is not valid JSON: {exc}")
    if not isinstance(data, dict):
        raise CLIError(f"--config {config} must hold a JSON object")
    if "kind" in data and "config" in data:  # the POST /v1/audits body (claims from the flags win)
        body = {k: v for k, v in data.items() if k in ("kind", "config", "claimed_delta", "webhook_url")}
        if kind and kind != data["kind"]:
            raise CLIError(f"--kind {kind} contradicts kind {data['kind']!r} in {config}")
        return body
    return {"kind": kind or "epsilon", "config": data}


def _summary(job: dict) -> str:
    result = job.get("result") or {}
    measured = result.get("epsilon")
    claim = job.get("claimed_epsilon")
    parts = [f"measured epsilon {measured:.6g}" if isinstance(measured, (int, float)) else "no measured epsilon"]
    if job.get("claimed_delta") is not None and isinstance(result.get("delta"), (int, float)):
        parts.append(f"delta {result['delta']:.3g} (claimed {job['claimed_delta']:.3g})")
    rel = "vs"
    if isinstance(measured, (int, float)) and claim is not None:
        rel = ">" if measured > claim else "<="
    return f"{', '.join(parts)} {rel} claimed epsilon {claim:g}" if claim is not None else ", ".join(parts)


def _outcome(job: dict) -> tuple[int, str]:
    status = job["status"]
    if status == "succeeded":
        if job.get("verdict") == "pass":
            return EXIT_PASS, f"PASS: {_summary(job)}"
        if job.get("verdict") == "violation":
            reason = job.get("verdict_reason")
            return EXIT_VIOLATION, f"VIOLATION: {_summary(job)}" + (f" ({reason})" if reason else "")
        if job.get("verdict") == "inconclusive":
            return EXIT_INCONCLUSIVE, (f"INCONCLUSIVE: {_summary(job)}; {job.get('verdict_reason') or 'no reason given'}"
                                       " (plan a design: dpicl audit plan)")
        return EXIT_ERROR, "ERROR: the job finished without a verdict (its result has no epsilon to compare)"
    if status == "failed":
        err = job.get("error") or {}
        return EXIT_ERROR, f"ERROR: the job failed: {err.get('message') or 'no reason given'}"
    return EXIT_ERROR, f"ERROR: the job was cancelled ({job['progress'].get('message') or ''})"


def write_junit(path: Path, *, kind: str, claimed_epsilon: float, job: dict | None, job_url: str | None,
                code: int, message: str, seconds: float, inconclusive_as: str = "skipped") -> None:
    """One test case per audit: <failure> for a violation, <error> for errors and time-outs;
    inconclusive as <skipped> or <failure> (``inconclusive_as``)."""
    name = f"{kind} audit: epsilon within claimed {claimed_epsilon:g}"
    classname = f"dpicl.audit.{kind}"
    inconclusive = code == EXIT_INCONCLUSIVE
    failures = 1 if code == EXIT_VIOLATION or (inconclusive and inconclusive_as == "failure") else 0
    errors = 1 if code in (EXIT_ERROR, EXIT_TIMEOUT) else 0
    skipped = 1 if inconclusive and inconclusive_as == "skipped" else 0
    stamp = datetime.now(timezone.utc).replace(microsecond=0).isoformat()
    suites = ET.Element("testsuites", name="dpicl audit", tests="1", failures=str(failures), errors=str(errors),
                        time=f"{seconds:.3f}")
    suite = ET.SubElement(suites, "testsuite", name=classname, tests="1", failures=str(failures),
                          errors=str(errors), skipped=str(skipped), time=f"{seconds:.3f}", timestamp=stamp)
    props = ET.SubElement(suite, "properties")
    result = (job or {}).get("result") or {}
    for k, v in (("job_id", (job or {}).get("id")), ("job_url", job_url), ("status", (job or {}).get("status")),
                 ("verdict", (job or {}).get("verdict")), ("verdict_reason", (job or {}).get("verdict_reason")),
                 ("claimed_epsilon", claimed_epsilon),
                 ("claimed_delta", (job or {}).get("claimed_delta")), ("measured_epsilon", result.get("epsilon")),
                 ("measured_delta", result.get("delta"))):
        if v is not None:
            ET.SubElement(props, "property", name=k, value=str(v))
    case = ET.SubElement(suite, "testcase", classname=classname, name=name, time=f"{seconds:.3f}")
    if code == EXIT_VIOLATION:
        el = ET.SubElement(case, "failure", message=message, type="PrivacyClaimViolation")
        el.text = message
    elif inconclusive and inconclusive_as == "failure":
        el = ET.SubElement(case, "failure", message=message, type="AuditInconclusive")
        el.text = message
    elif inconclusive:
        ET.SubElement(case, "skipped", message=message)
    elif code == EXIT_TIMEOUT:
        el = ET.SubElement(case, "error", message=message, type="Timeout")
        el.text = message
    elif code == EXIT_ERROR:
        el = ET.SubElement(case, "error", message=message, type="AuditError")
        el.text = message
    out = ET.SubElement(case, "system-out")
    out.text = "\n".join(x for x in (f"job: {job_url}" if job_url else None, message,
                                     json.dumps(result, indent=2, sort_keys=True) if result else None) if x)
    ET.indent(suites)
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(suites).write(path, encoding="utf-8", xml_declaration=True)


@audit_app.command("run")
def run(
    server: str = typer.Option(..., "--server", envvar="DPICL_SERVER", help="base URL, e.g. http://dpicl:8000"),
    config: Path = typer.Option(..., "--config", help="JSON: {\"kind\", \"config\"} or a bare config ('-' reads stdin)"),
    claimed_epsilon: float = typer.Option(..., "--claimed-epsilon", min=0, help="the epsilon you claim"),
    claimed_delta: Optional[float] = typer.Option(None, "--claimed-delta", min=0, max=1, help="the delta you claim"),
    kind: Optional[str] = typer.Option(None, "--kind", help="job kind when --config is a bare config (default epsilon)"),
    wait: bool = typer.Option(False, "--wait", help="wait for the verdict (what CI wants)"),
    timeout: Optional[float] = typer.Option(None, "--timeout", min=0, help="give up after S seconds (exit 3)"),
    junit: Optional[Path] = typer.Option(None, "--junit", help="write a JUnit XML report here"),
    as_json: bool = typer.Option(False, "--json", help="print the final job JSON on stdout"),
    run_id: Optional[str] = typer.Option(None, "--run-id", envvar="DPICL_RUN_ID",
                                         help="part of the idempotency key, e.g. $CI_PIPELINE_ID"),
    webhook_url: Optional[str] = typer.Option(None, "--webhook-url", help="also POST the final job JSON here"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress output"),
    retries: int = typer.Option(8, "--retries", min=0, max=50,
                                help="retries per request on network errors, 503 and a full job queue (with back-off)"),
    inconclusive_as: str = typer.Option("skipped", "--junit-inconclusive", help="JUnit: skipped | failure"),
) -> None:
    """Submit an audit and, with --wait, exit 0 (pass), 1 (violation), 2 (error), 3 (timeout) or 4 (inconclusive)."""
    if inconclusive_as not in ("skipped", "failure"):
        typer.echo("dpicl: --junit-inconclusive must be skipped or failure", err=True)
        raise typer.Exit(EXIT_ERROR)
    t0 = time.monotonic()
    deadline = Deadline(timeout)
    info = sys.stderr if as_json else sys.stdout
    job: dict | None = None
    job_url: str | None = None
    body: dict[str, Any] = {"kind": kind or "epsilon"}
    from app.client import DpiclError

    client = None
    try:
        body = _load_body(config, kind)
        body["claimed_epsilon"] = claimed_epsilon
        if claimed_delta is not None:
            body["claimed_delta"] = claimed_delta
        if webhook_url:
            body["webhook_url"] = webhook_url
        client = _sdk(server, deadline, max_retries=retries)
        try:
            job = client.submit_audit(body["kind"], body["config"], claimed_epsilon=claimed_epsilon,
                                      claimed_delta=claimed_delta, webhook_url=webhook_url,
                                      idempotency_key=idempotency_key(body, run_id))
        except DpiclError as exc:
            raise _cli_error(exc, deadline, "the service refused the audit") from None
        job_url = client.base_url + client.last_response.headers.get("Location", job["url"])
        print(job_url, file=info, flush=True)
        if job["status"] not in TERMINAL and not wait:
            code, message = EXIT_PASS, f"submitted: job {job['id']} is {job['status']} (use --wait for a verdict)"
        else:
            progress = Progress(sys.stderr, enabled=not quiet)
            try:
                try:
                    progress.show(job)
                    if job["status"] not in TERMINAL:
                        job = client.wait_audit(job["id"], timeout=deadline.left(),
                                                on_progress=progress.show)
                except TimeoutError:
                    raise CLIError(f"timed out after {timeout:g} s; job {job['id']} is still {job['status']} "
                                   f"(it keeps running: {job_url})", EXIT_TIMEOUT, job=job) from None
                except DpiclError as exc:
                    raise _cli_error(exc, deadline, f"cannot read job {job['id']}", job=job) from None
            finally:
                progress.done()
            code, message = _outcome(job)
    except CLIError as exc:
        code, message = exc.code, ("TIMEOUT: " if exc.code == EXIT_TIMEOUT else "ERROR: ") + exc.message
        job = exc.job or job
    finally:
        if client is not None:
            client.close()
    print(message, file=sys.stderr if as_json or code else info, flush=True)
    if as_json:
        print(json.dumps(job if job is not None else {"error": {"message": message}}, indent=2), flush=True)
    if junit is not None:
        write_junit(junit, kind=body.get("kind", "audit"), claimed_epsilon=claimed_epsilon, job=job, job_url=job_url,
                    code=code, message=message, seconds=time.monotonic() - t0, inconclusive_as=inconclusive_as)
    raise typer.Exit(code)


def _one_call(server: str, call, what: str, seconds: float = 120.0) -> Any:
    from app.client import DpiclError

    deadline = Deadline(seconds)
    with _sdk(server, deadline) as client:
        try:
            return call(client)
        except DpiclError as exc:
            raise _cli_error(exc, deadline, what) from None


def call_or_exit(server: str, call, what: str) -> Any:
    """One SDK call for a CLI command: its answer, or the error on stderr and exit code 2."""
    try:
        return _one_call(server, call, what)
    except CLIError as exc:
        typer.echo(f"dpicl: {exc.message}", err=True)
        raise typer.Exit(EXIT_ERROR)


@audit_app.command("plan")
def plan(
    server: str = typer.Option(..., "--server", envvar="DPICL_SERVER", help="base URL, e.g. http://dpicl:8000"),
    config: Path = typer.Option(..., "--config", help="JSON: {\"kind\", \"config\"} or a bare canary_mia config"),
    claimed_epsilon: Optional[float] = typer.Option(None, "--claimed-epsilon", min=0, help="the epsilon you claim"),
    seconds_per_trial: Optional[float] = typer.Option(None, "--seconds-per-trial", min=0,
                                                      help="measured speed, for the predicted time"),
    as_json: bool = typer.Option(False, "--json", help="print the plan JSON"),
) -> None:
    """Plan a canary_mia audit: trials per design that detect config.power.alternatives (POST /v1/audits/plan)."""
    try:
        body = _load_body(config, "canary_mia")
        req: dict[str, Any] = {"kind": body["kind"], "config": body["config"]}
        if claimed_epsilon is not None:
            req["claimed_epsilon"] = claimed_epsilon
        if seconds_per_trial is not None:
            req["seconds_per_trial"] = seconds_per_trial
        out = _one_call(server, lambda c: c.plan_audit(**req), "the service refused the plan")
    except CLIError as exc:
        typer.echo(f"dpicl: {exc.message}", err=True)
        raise typer.Exit(EXIT_ERROR)
    if as_json:
        typer.echo(json.dumps(out, indent=2))
        raise typer.Exit(EXIT_PASS if out.get("recommended") else EXIT_INCONCLUSIVE)
    typer.echo(f"claim epsilon {out['claimed_epsilon']:g}, detect {', '.join(out['alternatives'])} with "
               f"P >= {out['min_detection']:g} (confidence {out['confidence']:.4g})")
    for d in out["designs"]:
        n = d["trials"]
        what = f"{n} trials, {d['model_calls']} model calls" if n else "infeasible: " + "; ".join(d["reasons"])
        if n and d.get("seconds") is not None:
            what += f", ~{d['seconds']:.0f} s"
        tokens = f" max_tokens {d['max_tokens']}" if d.get("max_tokens") is not None else ""
        typer.echo(f"  {d['threat_model']:<9} partitions {d['partitions']:<2}{tokens} {what}")
    rec = out.get("recommended")
    typer.echo(f"recommended: {rec['threat_model']}, partitions {rec['partitions']}, trials {rec['trials']}" if rec
               else "no single design detects every alternative")
    for n in out["notes"]:
        typer.echo(f"  note: {n}")
    raise typer.Exit(EXIT_PASS if rec else EXIT_INCONCLUSIVE)


@audit_app.command("status")
def status(
    job_id: str = typer.Argument(..., help="job id"),
    server: str = typer.Option(..., "--server", envvar="DPICL_SERVER"),
) -> None:
    """Print a job's JSON."""
    try:
        job = _one_call(server, lambda c: c.get_audit(job_id), f"cannot read job {job_id}")
    except CLIError as exc:
        typer.echo(f"dpicl: {exc.message}", err=True)
        raise typer.Exit(EXIT_ERROR)
    typer.echo(json.dumps(job, indent=2))


@audit_app.command("cancel")
def cancel(
    job_id: str = typer.Argument(..., help="job id"),
    server: str = typer.Option(..., "--server", envvar="DPICL_SERVER"),
) -> None:
    """Cancel a job (a running one stops at its next progress point)."""
    try:
        job = _one_call(server, lambda c: c.cancel_audit(job_id), f"cannot cancel job {job_id}")
    except CLIError as exc:
        typer.echo(f"dpicl: {exc.message}", err=True)
        raise typer.Exit(EXIT_ERROR)
    typer.echo(f"{job['status']}{' (cancel requested)' if job['cancel_requested'] else ''}")
