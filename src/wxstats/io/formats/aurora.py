"""Microsoft Aurora's normalisation (``--format aurora``): ``aurora_normalisation.json``.

Aurora normalises each variable by ``(x - locations[key]) / scales[key]``
(``aurora/normalisation.py``), with two dicts of floats keyed by variable
name: a surface variable by its name (``2t``, ``msl``), an atmospheric one per
pressure level by ``f"{name}_{level}"`` (``z_500``), the level as Aurora
writes its ``atmos_levels``: a whole number without a decimal point. So the
file holds ``{"locations": {key: mean}, "scales": {key: std}}`` over the
values of one split (population std, ddof 0, float64 written with ``repr``,
which reads back to the same float), the names as in the dataset, plus a
``wxstats_run`` record. A field may have at most one dimension besides time
and the grid (its levels). :func:`read_aurora` reads such a file back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from wxstats.core.errors import InputError, WxstatsError
from wxstats.core.stats import Stats, StreamStats, weighting
from wxstats.core.streams import listed_features
from wxstats.core.untrusted import UntrustedInput, read_json
from wxstats.io.atomic import Writer
from wxstats.io.formats.netcdf import recorded_split

FILE = "aurora_normalisation.json"


def level_key(name: str, level: Any) -> str:
    """Aurora's key of ``name`` at ``level`` (``z_500``; ``z_0.5`` for a fractional level)."""
    value = level.item() if isinstance(level, np.generic) else level
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"{name}_{value}"


def _keys(stream: StreamStats) -> list[str]:
    lay = stream.layout
    if not lay.feature_dims:
        return [lay.variable]
    if len(lay.feature_dims) > 1:
        raise WxstatsError(
            f"variable {lay.variable}: --format aurora keys a field by its name and one level "
            f"(it has {', '.join(lay.feature_dims)}); choose the grid with --feature-dims"
        )
    dim = lay.feature_dims[0]
    levels = np.asarray(lay.coords[dim][1]) if dim in lay.coords else np.arange(len(stream.mean))
    return [level_key(lay.variable, level) for level in levels]


def aurora_outputs(stats: Stats, folder: Path, split: str) -> dict[Path, Writer]:
    """The writer of ``aurora_normalisation.json`` of ``split`` (see module docstring)."""
    locations: dict[str, float] = {}
    scales: dict[str, float] = {}
    for stream in stats.streams.values():
        if stream.layout is None or stream.layout.split != split:
            continue
        for key, mean, std in zip(_keys(stream), stream.mean, stream.std, strict=True):
            locations[key], scales[key] = float(mean), float(std)
    record = {
        "split": split,
        "method": f"population statistics (ddof 0), {weighting(stats.attrs)}, float64",
        "source": {k: v for k, v in stats.attrs.items() if isinstance(v, (str, int, float))},
        "run": stats.run,
    }
    content = {"locations": locations, "scales": scales, "wxstats_run": record}
    text = json.dumps(content, indent=1, default=str) + "\n"

    def write(path: Path) -> None:
        path.write_text(text)

    return {folder / FILE: write}


def is_aurora(folder: Path) -> bool:
    return (folder / FILE).is_file()


def read_aurora(folder: str | Path, split: str | None = None) -> Stats:
    """An Aurora normalisation file (wxstats' or Aurora's own dicts saved as JSON)
    as :class:`Stats`: one ``state`` stream, a feature per key, of the split
    ``wxstats_run`` records (``split``, when given, must be it), else of ``split``."""
    path = Path(folder) / FILE
    try:
        data = read_json(path)
        locations, scales = data["locations"], data["scales"]
        names = list(locations)
        mean = np.array([float(locations[n]) for n in names], dtype=np.float64)
        std = np.array([float(scales[n]) for n in names], dtype=np.float64)
    except UntrustedInput:
        raise
    except (OSError, ValueError, TypeError) as exc:
        raise InputError(f"{path}: cannot read: {exc}") from None
    except KeyError as exc:
        raise InputError(f"{path}: no {exc} (expected locations and scales)") from None
    record = data.get("wxstats_run") or {}
    attrs = {
        k: v for k, v in (record.get("source") or {}).items() if isinstance(v, (str, int, float))
    }
    stream = StreamStats(name="state", features=names, units=[""] * len(names), mean=mean, std=std)
    stream.layout = listed_features(
        "state", recorded_split(record.get("split"), split, str(path)), names
    )
    return Stats(
        source_kind="aurora",
        streams={"state": stream},
        attrs=attrs,
        origin=f"{path} (Aurora)",
    )
