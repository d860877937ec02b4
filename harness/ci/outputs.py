"""What ``poolfuzz ci`` leaves behind: JUnit XML, the JSON report, and the artifacts folder.

JUnit: one ``testsuite`` for the replay phase (a ``testcase`` per committed trace) and one for the fuzz
phase (a ``testcase`` per upstream target); a new finding is a ``failure`` whose text holds the trace's
path, the command that replays it and its steps; a target the checkout cannot run, or a trace of one, is
``skipped`` with the reason; known findings are recorded in the testcase's ``system-out`` and properties.
"""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

from poolfuzz.harness.ci.records import Finding, ReplayRecord, Report, WalkProperty, WalkRecord
from poolfuzz.harness.upstream.known import REPOSITORY

REPORT_SCHEMA = "poolfuzz-ci/1"
PROPERTIES: tuple[WalkProperty, ...] = ("seed", "steps_budget", "steps", "episodes", "cut_off", "known_again")
"""The keys of a walk record each target's JUnit testcase lists as properties (those its record has)."""


def is_new(finding: Finding) -> bool:
    """A finding that fails the run: an error, or a violation no known finding matches."""
    return finding.get("known") is None


def target_status(record: WalkRecord) -> str:
    """``failed`` (a new finding), ``known`` (known findings only), ``skipped`` or ``passed``."""
    if record.get("skipped"):
        return "skipped"
    findings = record.get("findings", [])
    if any(is_new(f) for f in findings):
        return "failed"
    return "known" if findings else "passed"


def keep_new_traces(targets: list[WalkRecord], replays: list[ReplayRecord], new_folder: Path) -> list[str]:
    """Copy each new finding's trace (and each failing committed trace) into ``new_folder``; the copies' paths.
    Each finding's ``artifact`` is set to its copy."""
    kept: list[str] = []
    sources: list[tuple[Finding | ReplayRecord, str, str]] = []
    for record in targets:
        for finding in record.get("findings", []):
            trace = finding.get("trace")
            if is_new(finding) and trace:
                sources.append((finding, trace, record["family"]))
    for replayed in replays:
        if replayed["status"] == "failed" and Path(replayed["trace"]).is_file():
            sources.append((replayed, replayed["trace"], "replayed"))
    for holder, source, folder in sources:
        destination = new_folder / folder / Path(source).name
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, destination)
        holder["artifact"] = str(destination)
        kept.append(str(destination))
    return kept


def write_report(report: Report, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(report, indent=2, sort_keys=False) + "\n")
    tmp.replace(path)


def write_junit(report: Report, path: Path) -> None:
    """The JUnit XML of ``report`` (see the module docstring)."""
    root = ET.Element("testsuites", name="poolfuzz ci")
    replay_suite = _suite(root, "poolfuzz.ci.replay")
    for replayed in report["replay"]:
        case = ET.SubElement(
            replay_suite, "testcase", classname="poolfuzz.ci.replay", name=_short(replayed["trace"]), time=f"{replayed['seconds']:.3f}"
        )
        if replayed["status"] == "failed":
            failure = ET.SubElement(case, "failure", message=replayed["line"], type="new finding")
            failure.text = "\n".join(part for part in (replayed["line"], replayed.get("steps_text", ""), _artifact(replayed)) if part)
        elif replayed["status"] == "skipped":
            ET.SubElement(case, "skipped", message=replayed["line"])
        ET.SubElement(case, "system-out").text = replayed["line"]
    fuzz_suite = _suite(root, "poolfuzz.ci.fuzz")
    for record in report["targets"]:
        name = record["target"]
        case = ET.SubElement(
            fuzz_suite,
            "testcase",
            classname=f"poolfuzz.ci.fuzz.{record['distribution']}",
            name=name,
            time=f"{record.get('seconds', 0.0):.3f}",
        )
        properties = ET.SubElement(case, "properties")
        for key in PROPERTIES:
            if key in record:
                ET.SubElement(properties, "property", name=key, value=str(record[key]))
        status = target_status(record)
        if status == "skipped":
            ET.SubElement(case, "skipped", message=record.get("reason", "skipped"))
            continue
        out: list[str] = [f"{record['steps']} steps of {record['steps_budget']}, seed {record['seed']}"]
        for finding in record["findings"]:
            known = finding["known"]
            if known is not None:  # not is_new(finding)
                ET.SubElement(properties, "property", name="known_finding", value=f"{known['number']} {known['key']}")
                out.append(
                    f"KNOWN [{finding['invariant']}] finding {known['number']} {known['key']} ({known['upstream']}): {finding['trace']}"
                )
        new = [f for f in record["findings"] if is_new(f)]
        if new:
            finding = new[0]
            failure = ET.SubElement(case, "failure", message=f"new finding: {finding_text(finding)}", type=finding["kind"])
            failure.text = "\n".join(
                part
                for part in (finding["message"], _artifact(finding), finding.get("replay") or "", finding.get("steps_text") or "")
                if part
            )
        ET.SubElement(case, "system-out").text = "\n".join(out)
    for suite in root:
        cases = suite.findall("testcase")
        suite.set("tests", str(len(cases)))
        suite.set("failures", str(sum(1 for c in cases if c.find("failure") is not None)))
        suite.set("errors", "0")
        suite.set("skipped", str(sum(1 for c in cases if c.find("skipped") is not None)))
        suite.set("time", f"{sum(float(c.get('time', '0')) for c in cases):.3f}")
    ET.indent(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def finding_text(finding: Finding) -> str:
    """``[invariant] message`` of a violation (its message names the invariant once), the exception of an error."""
    message = str(finding.get("message") or "")
    invariant = finding.get("invariant")
    if invariant is None or message.startswith(f"[{invariant}]"):
        return message
    return f"[{invariant}] {message}"


def _short(path: str) -> str:
    """``path`` relative to the working folder (or to poolfuzz's checkout) where it lies below it."""
    for base in (Path.cwd(), REPOSITORY):
        try:
            return str(Path(path).resolve().relative_to(base.resolve()))
        except ValueError:
            continue
    return path


def _suite(root: ET.Element, name: str) -> ET.Element:
    return ET.SubElement(root, "testsuite", name=name)


def _artifact(record: Finding | ReplayRecord) -> str:
    if record.get("artifact"):
        return f"trace kept as {record['artifact']}"
    if record.get("trace"):
        return f"trace: {record['trace']}"
    return ""
