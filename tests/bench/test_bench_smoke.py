"""Our benchmark workloads and ``bench/run``'s reporting at a tiny size, so they cannot rot.

Nothing here asserts a time or a memory figure: only that each workload runs through the real
seam, checks what it claims to check, and reports in the shape ``bench/run`` reads.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import compare, scaling_curve, tracked_per_child, workloads
from bench.acceptance import acceptance


def test_w1_sequential_delegations_and_the_task_floor_are_summarized() -> None:
    result = asyncio.run(workloads.w1(20, 2, blocks=2))
    assert set(result) == {"W1_oneshot", "W1_oneshot_budget", "W1_task_floor"}
    summary = result["W1_oneshot"]
    assert isinstance(summary, dict)
    assert summary["n"] == 20
    assert summary["min_us"] <= summary["median_us"] <= summary["p95_us"] <= summary["max_us"]


def test_w2_barrier_holds_every_child_in_flight_before_collecting() -> None:
    result = asyncio.run(workloads.w2("W2_oneshot_barrier", 20, warmup=2))
    assert result["children"] == 20
    assert result["barrier"] is True
    assert result["rss_at_barrier_mib"] is not None


def test_w2_variant_runs_in_a_fresh_interpreter() -> None:
    result = workloads.w2_in_fresh_interpreter("W2_oneshot_instant", 10)
    assert result.get("children") == 10, result
    assert result["rss_at_barrier_mib"] is None


def test_w3_cold_resume_hands_the_model_the_whole_persisted_history(tmp_path: Path) -> None:
    result = asyncio.run(workloads.w3(3, 2, tmp_path, build_concurrency=2))
    assert result["n"] == 3
    assert result["history_items_seen_by_model"] == 5  # 2 turns + the resume: 3 user, 2 replies
    assert isinstance(result["db_bytes"], int)
    assert result["db_bytes"] > 0


def test_w4_drain_releases_every_activation_of_a_depth_4_tree() -> None:
    result = asyncio.run(workloads.w4(30))
    assert result["activations"] == 30
    assert isinstance(result["gc_ms"], float)
    assert result["gc_ms"] >= 0
    assert isinstance(result["gc_collections"], list)
    assert len(result["gc_collections"]) == 3
    assert result["levels"] == workloads.tree_levels(30)


def test_tree_levels_have_depth_4_and_the_requested_size() -> None:
    for size in (4, 30, 1_000, 10_000):
        levels = workloads.tree_levels(size)
        assert len(levels) == 4
        assert sum(levels) == size
        assert all(n > 0 for n in levels)
    assert workloads.tree_levels(10_000) == [10, 100, 1_000, 8_890]


def test_w6_w7_start_and_drain_a_held_chain_and_a_wide_tree() -> None:
    for chain in (True, False):
        result = asyncio.run(workloads.held_drain(12, chain=chain))
        assert result["children"] == 12
        assert isinstance(result["kib_per_child"], float)
        assert isinstance(result["start_cpu_ms"], float)
        assert isinstance(result["drain_cpu_ms"], float)


def test_w6_size_runs_in_a_fresh_interpreter() -> None:
    result = workloads.shape_in_fresh_interpreter("chain", 5)
    assert result.get("children") == 5, result


def test_w6_w7_figures_scale_the_large_size_by_the_small() -> None:
    runs = {
        "1000": {"start_ms": 10.0, "drain_ms": 5.0, "kib_per_child": 20.0},
        "10000": {"start_ms": 100.0, "drain_ms": 65.0, "kib_per_child": 22.0},
    }
    figures = compare.figures_of("ours", {"W6_chain": runs})
    assert figures["W6_start_drain_10k_ms"] == 165.0
    assert figures["W6_scaling_10k_over_1k"] == 11.0
    assert figures["W6_kib_per_child_10k"] == 22.0
    assert figures["W6_kib_10k_over_1k"] == 1.1
    assert "W7_scaling_10k_over_1k" not in figures


def test_tracked_objects_per_held_child_are_counted_by_type() -> None:
    for chain in (False, True):
        result = asyncio.run(tracked_per_child.per_child(3, 6, 0.5, chain=chain))
        assert result["shape"] == ("chain" if chain else "wide")
        by_type = result["by_type"]
        assert isinstance(by_type, dict)
        assert by_type.get("ReferenceAgent") == 1.0  # one held agent per child


def test_tracked_per_child_runs_one_w7_size_with_its_collections() -> None:
    result = tracked_per_child.collected("wide", 5)
    assert result["children"] == 5
    counts = result["collections"]
    assert isinstance(counts, list)
    assert len(counts) == 3


def test_w5_counts_events_through_the_core_apply() -> None:
    result = workloads.w5(10, 5, repeats=1)
    assert result["events"] == 50  # 10 events per child life
    assert isinstance(result["events_per_s"], int)


def test_w1_to_w3_peer_figures_come_from_the_documented_variants() -> None:
    peer = {"W1_as_tool": {"median_us": 900.0, "p95_us": 1000.0}, "W3_resume": {"median_us": 5.0}}
    figures = compare.figures_of("openai-agents", peer)
    assert figures["W1_us_median"] == 900.0
    assert figures["W3_resume_us_median"] == 5.0
    assert figures["W2_wall_ms"] is None
    assert "W5_core_events_per_s" not in figures


def _ours(drain_small: float, drain_large: float) -> dict[str, object]:
    return {
        "W1_oneshot": {"median_us": 100.0, "p95_us": 150.0},
        "W2_oneshot_barrier": {"wall_ms": 50.0, "kib_per_child": 8.0},
        "W3_resume": {"median_us": 400.0},
        "W4_drain": {
            "1000": {"drain_ms": drain_small},
            "10000": {"drain_ms": drain_large, "gc_ms": drain_large / 4},
        },
        "W5_core": {"events_per_s": 60_000},
        "env": {"packages": {"dsh-subagent": "0.1.0"}},
    }


def test_report_takes_medians_and_leaves_a_failed_or_absent_peer_out(tmp_path: Path) -> None:
    floor = {"W1_direct": {"median_us": 5.0, "p95_us": 6.0}, "W3_resume": {"median_us": 200.0}}
    records: list[tuple[str, compare.Record]] = [
        ("ours", {"rc": 0, "others_cpu_pct": 0.0, "result": _ours(10.0, 100.0)}),
        ("ours", {"rc": 0, "others_cpu_pct": 40.0, "result": _ours(10.0, 120.0)}),
        ("ours", {"rc": 0, "others_cpu_pct": 0.0, "result": _ours(10.0, 110.0)}),
        ("asyncio_floor", {"rc": 0, "others_cpu_pct": 0.0, "result": floor}),
        ("openai-agents", {"rc": 1, "others_cpu_pct": 0.0, "error": "boom"}),
    ]
    latest, rendered = compare.report(
        records, {"pydantic-ai": "install failed"}, reps=3, stamp=compare.utc_stamp(0)
    )
    assert set(latest) == {"date", "machine", "versions", "workloads"}
    assert latest["date"] == "1970-01-01T00:00:00Z"
    workloads_ = latest["workloads"]
    assert isinstance(workloads_, dict)
    assert workloads_["W1_us_median"] == {"ours": 100.0, "asyncio_floor": 5.0}
    assert workloads_["W4_drain_10k_ms"] == {"ours": 110.0}
    assert workloads_["W4_scaling_10k_over_1k"] == {"ours": 11.0}
    assert all("openai-agents" not in by_system for by_system in workloads_.values())
    assert not compare.TABLE_ONLY & set(workloads_)  # CPU cross-checks stay in the table
    assert "| `W1_us_median` | 100 [100\u2013100] | 5.00 |" in rendered
    assert "| `W4_gc_10k_ms` | 27.50 [25.00\u201330.00] |" in rendered
    assert "| 20 |" in rendered  # ours / floor
    assert "pydantic-ai absent: install failed" in rendered
    assert "boom" in rendered
    assert "ours 0.0, 40.0, 0.0; asyncio_floor 0.0;" in rendered
    json.dumps(latest)

    page = tmp_path / "RESULTS.md"
    page.write_text(f"# prose before\n{compare.MARK_BEGIN}\nold\n{compare.MARK_END}\nafter\n")
    compare.replace_table(page, "new table")
    compare.replace_table(page, "newer table")
    text = page.read_text()
    assert text.startswith("# prose before\n")
    assert text.endswith("\nafter\n")
    assert "newer table" in text
    assert "old" not in text
    assert "new table" not in text


def test_run_script_keeps_the_last_json_line_or_the_error() -> None:
    ok = compare.run_script([sys.executable, "-c", "print('noise'); print('{\"a\": 1}')"], 0.0)
    assert ok["rc"] == 0
    assert ok["result"] == {"a": 1}
    failed = compare.run_script([sys.executable, "-c", "raise SystemExit('broken')"], 0.0)
    assert failed["rc"] == 1
    assert failed["error"] == "broken"
    assert "result" not in failed
    silent = compare.run_script([sys.executable, "-c", "pass"], 0.0)
    assert silent["rc"] == "no JSON result"
    assert silent["error"] == "exit no JSON result"


def test_from_raw_reads_back_an_earlier_runs_records(tmp_path: Path) -> None:
    raw = tmp_path / "raw.jsonl"
    lines = [
        {"system": "ours", "rep": 1, "rc": 0, "result": _ours(1.0, 10.0)},
        {"system": "langgraph", "rep": 2, "rc": 1, "error": "x"},
    ]
    raw.write_text("".join(json.dumps(line) + "\n" for line in lines))
    records, reps = compare.load_raw(raw)
    assert reps == 2
    assert records == [
        ("ours", {"rc": 0, "result": _ours(1.0, 10.0)}),
        ("langgraph", {"rc": 1, "error": "x"}),
    ]


def test_quick_run_of_ours_alone_writes_the_issue_shape_with_the_peers_absent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    compare.main(["--quick", "--no-peers", "--results", str(tmp_path)])
    latest = json.loads((tmp_path / "quick.json.tmp").read_text())
    assert set(latest) == {"date", "machine", "versions", "workloads"}
    assert set(latest["workloads"]) == {
        "W1_us_median",
        "W1_us_p95",
        "W2_wall_ms",
        "W2_kib_per_child",
        "W3_resume_us_median",
        "W4_drain_10k_ms",
        "W4_scaling_10k_over_1k",
        "W5_core_events_per_s",
        *(
            f"{w}_{figure}"
            for w in ("W6", "W7")
            for figure in (
                "start_drain_10k_ms",
                "scaling_10k_over_1k",
                "kib_per_child_10k",
                "kib_10k_over_1k",
            )
        ),
        *(
            f"ACC_{name}_{figure}"
            for name in ("1", "10", "100", "sqlite_floor")
            for figure in ("us_median", "us_p99", "msgs_per_s")
        ),
        *(f"OTEL_W1_{name}" for name in compare.OTEL_FIGURES),
    }
    assert all(set(by_system) == {"ours"} for by_system in latest["workloads"].values())
    assert "asyncio_floor absent: not requested (--no-peers)" in capsys.readouterr().out
    assert len((tmp_path / "quick-raw.jsonl.tmp").read_text().splitlines()) == 1


@pytest.mark.parametrize(
    ("workload", "size", "heading"),
    [
        ("W1", "5", "top functions by own time"),
        ("W2", "5", "KiB allocated per in-flight child"),
        ("W3", "2", "own time per module"),
        ("W4", "12", "top functions by own time"),
    ],
)
def test_profile_reports_the_top_entries_of_each_workload(
    workload: str, size: str, heading: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench import profile

    argv = ["bench.profile", workload, "--size", size, "--top", "3"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "argv", argv)
        profile.main()
    assert heading in capsys.readouterr().out


def test_acc_acceptance_latency_and_the_sqlite_floor_are_summarized() -> None:
    result = asyncio.run(acceptance(20, (1, 4)))
    assert set(result) == {"ACC_1", "ACC_4", "ACC_sqlite_floor"}
    for figures in result.values():
        assert isinstance(figures, dict)
        assert figures["n"] == 20
        assert figures["msgs_per_s"] > 0


def test_acc_callgrind_driver_sends_and_profiles_the_senders_phase(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import pstats

    from bench import acceptance_callgrind

    profile = tmp_path / "senders.prof"
    argv = ["--messages", "12", "--senders", "4", "--children", "3", "--profile", str(profile)]
    acceptance_callgrind.main(argv)
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["messages"] == 12
    assert printed["msgs_per_s"] > 0
    assert pstats.Stats(str(profile)).get_stats_profile().func_profiles


def test_obs_1_otel_w1_runs_each_tracing_setup_in_its_own_interpreter() -> None:
    from bench.otel_overhead import otel_overhead

    result = asyncio.run(otel_overhead(2, 2, 1, rounds=1))
    # unavailable really runs without the package: telemetry.AVAILABLE is false at import
    assert result["available"] == {"unavailable": False, "api": True, "sdk_noop": True}
    assert result["delegations_per_variant"] == 4
    assert isinstance(result["api_overhead_pct"], float)
    assert isinstance(result["sdk_noop_overhead_pct"], float)
    assert isinstance(result["hooks_api_added_us"], float)  # the hooks measured directly
    assert isinstance(result["api_hooks_pct_of_w1"], float)
    figures = compare.figures_of("ours", {"W1_otel": result})
    assert figures["OTEL_W1_api_overhead_pct"] == result["api_overhead_pct"]


def test_instructions_w3_body_builds_its_store_and_resumes_from_a_copy(tmp_path: Path) -> None:
    """``bench/instructions.py``'s W3 bodies, outside valgrind: the store built once, then
    cold resumes of a fresh copy (each asserts the model saw the whole history)."""
    root = Path(__file__).resolve().parents[2]
    child = root / "bench" / "instructions_child.py"
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONHASHSEED": "0"}
    for body, units in (("W3_build", "0"), ("W3", "2"), ("W3", "2")):
        subprocess.run([sys.executable, str(child), body, units], cwd=tmp_path, env=env, check=True)
    assert (tmp_path / "w3-store.sqlite").exists()
    assert (tmp_path / "w3-run.sqlite").exists()


def test_scaling_curve_reports_median_cost_per_child_and_the_ratios_10x_apart() -> None:
    readings = [
        scaling_curve.Reading("wide", "on", size, ms, ms / 2, ms / 10)
        for size, ms in ((100, 10.0), (100, 30.0), (100, 20.0), (1000, 240.0))
    ]
    rows = scaling_curve.table(readings, [100, 1000]).splitlines()
    assert rows[0] == "| shape | gc | figure | 100 | 1,000 | 100 -> 1,000 |"
    # the median of 10, 20, 30 ms over 100 children is 200 us each; 240 / 20 = 12x
    assert rows[2] == "| wide | on | start us/child | 200 | 240 | 12.00x |"
    assert rows[3] == "| wide | on | drain us/child | 100 | 120 | 12.00x |"
    # KiB per child is a median already per child: 2.0 -> 24.0 is 12x per child
    assert rows[4] == "| wide | on | memory KiB/child | 2.00 | 24.00 | 12.00x |"


def test_scaling_curve_runs_one_reading_in_a_fresh_interpreter() -> None:
    reading = scaling_curve._fresh("tree", 5, "off")
    assert reading.start_ms > 0
    assert reading.drain_ms > 0
    assert isinstance(reading.kib_per_child, float)
