"""A real daily price file for the tests: the NASDAQ Composite's and the S&P 500's daily
prices, 1999-2018, as the ``arch`` package ships them (a test dependency), written in FinRL's
long format (``date,tic,open,high,low,close,volume``)."""

import csv
import gzip
import importlib.util
from pathlib import Path

import pytest


def arch_data_dir() -> Path:
    spec = importlib.util.find_spec("arch")  # found, not imported
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("arch is not installed")
    directory = Path(spec.submodule_search_locations[0]) / "data"
    if not (directory / "nasdaq" / "nasdaq.csv.gz").exists():
        pytest.skip("arch ships no nasdaq.csv.gz")
    return directory


def real_index_prices(tmp_path: Path) -> tuple[Path, dict[str, list[dict[str, str]]]]:
    """``(path, tables)``: the file written in ``tmp_path`` and arch's rows by ticker
    (``NASDAQ``, ``SP500``)."""
    directory = arch_data_dir()
    tables = {}
    for tic, name in (("NASDAQ", "nasdaq"), ("SP500", "sp500")):
        with gzip.open(directory / name / f"{name}.csv.gz", "rt", newline="") as file:
            tables[tic] = list(csv.DictReader(file))
    iso = {}
    for row in tables["NASDAQ"]:
        month, day, year = row["Date"].split("/")
        iso[row["Date"]] = f"{year}-{int(month):02d}-{int(day):02d}"
    path = tmp_path / "indices.csv"
    with path.open("w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["date", "tic", "open", "high", "low", "close", "volume"])
        for nasdaq, sp500 in zip(tables["NASDAQ"], tables["SP500"], strict=True):
            for tic, row in (("NASDAQ", nasdaq), ("SP500", sp500)):
                fields = ("Open", "High", "Low", "Close", "Volume")
                writer.writerow([iso[row["Date"]], tic, *(row[field] for field in fields)])

    return path, tables
