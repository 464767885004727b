"""The names of what a run directory holds (one definition for every module that reads or
writes them)::

    config.json        the full resolved RunSpec (podracer.runs.training.load_spec)
    metrics.jsonl      "train" and "eval" records (podracer.runs.logging)
    leaderboard.jsonl  a population's "leaderboard" records (podracer.population.ensemble)
                       or an elastic run's, one per pod report (podracer.runs.leaderboard)
    results.json       a sweep's members and table (podracer.experiments.sweep)
    backtest_<period>.json, .png   a trading run's backtest (podracer.cli.backtest)
    tb/                TensorBoard events
    checkpoints/       orbax checkpoints, one step directory per saved update count
    videos/            eval-update<U>.mp4 (podracer eval --video), update<U>.mp4
                       (--video-interval): podracer.runs.video
"""

CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.jsonl"
LEADERBOARD_FILE = "leaderboard.jsonl"
RESULTS_FILE = "results.json"
TENSORBOARD_DIR = "tb"
CHECKPOINT_DIR = "checkpoints"
VIDEO_DIR = "videos"
