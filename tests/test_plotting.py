"""Learning-curve and benchmark plots from synthetic run directories."""

import json
import math

import numpy as np
import pytest

from podracer.runs import plotting

NUM_SEEDS = 3
STEPS = [512 * (i + 1) for i in range(40)]


def write_run(run_dir, seed_offset=0, steps=STEPS, null_at=None, truncated=False):
    """A run directory with train records for NUM_SEEDS members and an eval record every 10."""
    run_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed_offset)
    lines = []
    for i, step in enumerate(steps):
        returns = [float(20 + 4 * i + 10 * rng.normal()) for _ in range(NUM_SEEDS)]
        if null_at is not None and i == null_at[0]:
            returns[null_at[1]] = None
        valid = [r for r in returns if r is not None]
        record = {
            "kind": "train",
            "step": step,
            "updates": i + 1,
            "elapsed_s": 0.1 * (i + 1),
            "sps": 5000.0,
            "episode_return": sum(valid) / len(valid),
            "episode_returns": returns,
            "loss": 1.0 / (i + 1),
            "entropy": 0.69,
        }
        lines.append(json.dumps(record))
        if i % 10 == 9:
            evals = [float(30 + 4 * i + rng.normal()) for _ in range(NUM_SEEDS)]
            lines.append(
                json.dumps(
                    {
                        "kind": "eval",
                        "step": step,
                        "eval_return": float(np.mean(evals)),
                        "eval_returns": evals,
                        "eval_return_std": float(np.std(evals)),
                        "episodes": 10,
                    }
                )
            )
    text = "\n".join(lines) + "\n"
    if truncated:
        text += '{"kind": "train", "step": 99999, "episode_re'
    (run_dir / "metrics.jsonl").write_text(text)
    return run_dir


def assert_png(path):
    from matplotlib.image import imread

    assert path.is_file()
    assert path.stat().st_size > 10_000
    pixels = imread(path)
    assert pixels.ndim == 3
    assert not np.all(pixels == pixels[0, 0])


@pytest.mark.slow
def test_learning_curves_shapes_and_nulls(tmp_path):
    run = write_run(tmp_path / "run", null_at=(2, 1), truncated=True)
    (curve,) = plotting.learning_curves([run])
    np.testing.assert_array_equal(curve.step, STEPS)
    assert curve.values.shape == (NUM_SEEDS, len(STEPS))
    assert math.isnan(curve.values[1, 2])
    assert np.isnan(curve.values).sum() == 1
    (evals,) = plotting.learning_curves(run, kind="eval")
    np.testing.assert_array_equal(evals.step, STEPS[9::10])
    assert evals.values.shape == (NUM_SEEDS, 4)
    (loss,) = plotting.learning_curves(run, metric="loss")
    assert loss.values.shape == (1, len(STEPS))
    np.testing.assert_allclose(loss.values[0], [1.0 / (i + 1) for i in range(len(STEPS))])


def test_read_metrics_skips_truncated_last_line_only(tmp_path):
    run = write_run(tmp_path / "run", truncated=True)
    records = plotting.read_metrics(run)
    assert len(records) == len(STEPS) + 4
    assert records == plotting.read_metrics(run / "metrics.jsonl")
    path = run / "metrics.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], "{not json", *lines[1:3]]) + "\n")
    with pytest.raises(ValueError, match=r"metrics.jsonl:2 is not a JSON object"):
        plotting.read_metrics(run)


def test_missing_metrics_file_is_a_clear_error(tmp_path, capsys):
    missing = tmp_path / "no-such-run"
    with pytest.raises(FileNotFoundError, match=r"no metrics file at .*no-such-run/metrics.jsonl"):
        plotting.read_metrics(missing)
    assert plotting.main([str(missing), "--out", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("podracer plot: error: no metrics file at")
    assert str(missing / "metrics.jsonl") in err
    assert not (tmp_path / "x.png").exists()


def test_missing_metric_and_kind_are_clear_errors(tmp_path):
    run = write_run(tmp_path / "run")
    with pytest.raises(ValueError, match=r"no 'train' record has 'q_value' or 'q_values'"):
        plotting.learning_curves(run, metric="q_value")
    with pytest.raises(ValueError, match=r"kind='test' is not allowed: choose one of train, eval"):
        plotting.learning_curves(run, kind="test")


def test_plot_runs_pooled_cli(tmp_path, capsys):
    runs = [write_run(tmp_path / f"seed{s}", seed_offset=s, null_at=(0, s)) for s in range(3)]
    out = tmp_path / "plots" / "curves.png"
    assert plotting.main([*map(str, runs), "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert_png(out)


def test_plot_runs_separate_eval_and_labels(tmp_path):
    runs = [write_run(tmp_path / f"seed{s}", seed_offset=s) for s in range(3)]
    # Different logging steps: pooled onto the union of the steps.
    runs.append(write_run(tmp_path / "other", seed_offset=9, steps=[s + 100 for s in STEPS]))
    out = tmp_path / "eval.png"
    argv = [*map(str, runs), "--out", str(out), "--kind", "eval", "--separate"]
    assert plotting.main(argv) == 0
    assert_png(out)
    labelled = plotting.plot_runs(runs, tmp_path / "labels.png", labels=["a", "a", "b", "b"])
    assert_png(labelled)
    with pytest.raises(ValueError, match="labels has 1 entries for 4 run directories"):
        plotting.plot_runs(runs, tmp_path / "bad.png", labels=["a"])


def test_pool_interpolates_onto_union_of_steps():
    a = plotting.Curve("a", np.array([0, 10, 20]), np.array([[0.0, 10.0, 20.0]]))
    b = plotting.Curve("b", np.array([5, 15]), np.array([[1.0, 3.0]]))
    step, values = plotting._pool([a, b])
    np.testing.assert_array_equal(step, [0, 5, 10, 15, 20])
    np.testing.assert_allclose(values[0], [0, 5, 10, 15, 20])
    np.testing.assert_allclose(values[1], [np.nan, 1, 2, 3, np.nan])


def test_mean_and_ci():
    values = np.array([[1.0, np.nan, np.nan], [3.0, 4.0, np.nan], [5.0, np.nan, np.nan]])
    mean, low, high = plotting.mean_and_ci(values)
    np.testing.assert_allclose(mean, [3.0, 4.0, np.nan])
    assert low[0] < 3.0 < high[0]
    assert low[1] == high[1] == 4.0
    assert math.isnan(low[2]) and math.isnan(high[2])


def test_plot_members(tmp_path):
    run = write_run(tmp_path / "run", null_at=(5, 0))
    out = tmp_path / "members.png"
    assert plotting.main([str(run), "--out", str(out), "--members"]) == 0
    assert_png(out)
    assert plotting.main([str(run), str(run), "--out", str(out), "--members"]) == 2


def board(updates, lrs, scores, replaced):
    return {
        "kind": "leaderboard",
        "step": 64 * updates,
        "updates": updates,
        "scores": scores,
        "members": [
            {"member": m, "score": scores[m], "hparams": {"lr": lr}} for m, lr in enumerate(lrs)
        ],
        "replaced": [{"member": m, "parent": p} for m, p in replaced],
    }


LEADERBOARDS = [
    board(2, [1.0, 2.0, 3.0], [1.0, 5.0, 9.0], [(0, 2)]),  # 0 becomes a copy of 2 (lr 3.75)
    board(4, [3.75, 2.0, 3.0], [9.5, 2.0, 9.0], [(1, 0)]),  # 1 becomes a copy of 0 (lr 4.6875)
    board(6, [3.75, 4.6875, 3.0], [10.0, 9.8, 9.0], []),
]


def test_survivor_hparams_follow_the_lineage_back():
    lineages = plotting.survivor_hparams(LEADERBOARDS)
    np.testing.assert_array_equal(lineages[0]["lr"], [3.0, 3.75, 3.75])  # 2's line, then 0's
    np.testing.assert_array_equal(lineages[1]["lr"], [3.0, 3.75, 4.6875])  # 2 -> 0 -> 1
    np.testing.assert_array_equal(lineages[2]["lr"], [3.0, 3.0, 3.0])


def test_plot_population(tmp_path):
    run = tmp_path / "pop"
    run.mkdir()
    (run / "leaderboard.jsonl").write_text("".join(json.dumps(b) + "\n" for b in LEADERBOARDS))
    out = tmp_path / "population.png"
    assert plotting.main([str(run), "--population", "--out", str(out)]) == 0
    assert_png(out)
    assert plotting.main([str(tmp_path), "--population", "--out", str(out)]) == 2  # no file


def write_benchmarks(path):
    lines = []
    for num_envs, sps in [(4, 113_600.0), (64, 148_856.2), (1024, 133_300.0), (64, 140_000.0)]:
        record = {
            "config": f"ppo-{num_envs}",
            "env": "gymnax:CartPole-v1",
            "num_envs": num_envs,
            "devices": 1,
            "sps": sps,
            "env_only_sps": 30 * sps,
        }
        lines.append(json.dumps(record))
    lines.append(json.dumps({"config": "catch-demo", "env": "catch", "num_envs": 128, "sps": 5e5}))
    lines.append("some log text that is not JSON")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_plot_benchmark(tmp_path):
    results = write_benchmarks(tmp_path / "results.jsonl")
    out = tmp_path / "sps.png"
    assert plotting.main([str(results), "--out", str(out), "--benchmark"]) == 0
    assert_png(out)
    records = plotting.read_benchmarks(results)
    assert len(records) == 5
    assert plotting._benchmark_x(records, None) == "num_envs"  # devices does not vary
    assert {plotting._series_name(r) for r in records} == {"ppo", "catch-demo"}
    # A devices sweep without num_envs picks devices.
    scaling = tmp_path / "scaling.jsonl"
    scaling.write_text(
        "\n".join(
            json.dumps({"config": f"anakin-{d}", "devices": d, "sps": 1e5 * d}) for d in (1, 2)
        )
    )
    assert plotting._benchmark_x(plotting.read_benchmarks(scaling), None) == "devices"
    with pytest.raises(ValueError, match="x='processes' is in no benchmark record"):
        plotting.plot_benchmark(results, out, x="processes")


def test_benchmarks_plot_script(tmp_path):
    import runpy
    from pathlib import Path

    results = write_benchmarks(tmp_path / "results.jsonl")
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "plot.py"
    namespace = runpy.run_path(str(script))
    out = tmp_path / "script.png"
    assert namespace["main"]([str(results), "--out", str(out), "--x", "num_envs"]) == 0
    assert_png(out)


def test_a_sweep_directory_is_one_curve_per_sweep_point(tmp_path):
    """``results.json`` beside a one-program sweep's metrics: members are combination-major."""
    from podracer.runs.plotting import sweep_curves

    run = tmp_path / "sweep"
    run.mkdir()
    rows = [
        {"member": i, "seed": i % 2, "lr": lr, "final_return": 0.0}
        for i, lr in enumerate([0.1, 0.1, 0.3, 0.3])
    ]
    (run / "results.json").write_text(json.dumps({"grid": {"lr": [0.1, 0.3]}, "members": rows}))
    records = [
        {"kind": "train", "step": step, "episode_returns": [step, step + 1, 10 * step, 20 * step]}
        for step in (1, 2)
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    labels, curves = sweep_curves(run, "episode_return", "train")
    assert labels == ["lr=0.1", "lr=0.3"]
    np.testing.assert_array_equal(curves[0].values, [[1, 2], [2, 3]])
    np.testing.assert_array_equal(curves[1].values, [[10, 20], [20, 40]])
    out = plotting.plot_runs([run], tmp_path / "sweep.png")
    assert out.is_file()
