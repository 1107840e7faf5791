"""wxstats report: the figure renders and says something, the HTML page is complete,
and the sanity checks flag exactly the suspicious variables."""

from __future__ import annotations

import base64
import io
import re
import struct
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from synthetic_stats import SUSPICIOUS, write_synthetic

from reference import meps_reference
from wxstats.cli import main
from wxstats.io.read import read_stats
from wxstats.runtime.options import ComputeOptions
from wxstats.runtime.outputs import open_source, write_outputs
from wxstats.runtime.run import compute_source
from wxstats.tools.checks import findings
from wxstats.tools.report import write_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class Page(HTMLParser):
    """Collects the text, table cells and image sources of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.images: list[str] = []
        self.cells = 0
        self.open_tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.images.append(dict(attrs)["src"])
        elif tag == "td":
            self.cells += 1
        if tag not in ("img", "br", "meta"):
            self.open_tags.append(tag)

    def handle_endtag(self, tag):
        assert self.open_tags and self.open_tags[-1] == tag, f"unbalanced </{tag}>"
        self.open_tags.pop()

    def handle_data(self, data):
        self.text.append(data)


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == PNG_MAGIC
    return struct.unpack(">II", data[16:24])


def _ink(data: bytes) -> float:
    """Fraction of pixels that are not (near) white."""
    pixels = np.asarray(Image.open(io.BytesIO(data)).convert("L"))
    return float((pixels < 200).mean())


def _parse(html_text: str) -> Page:
    page = Page()
    page.feed(html_text)
    page.close()
    assert not page.open_tags, f"unclosed tags {page.open_tags}"
    return page


@pytest.fixture(scope="module")
def example_stats(meps_small, tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    source = open_source(ComputeOptions(dataset=meps_small))
    options = ComputeOptions(output_dir=out, summary=out / "s.json")
    write_outputs(source, compute_source(source), options)
    return out / "wxstats_stats.nc"


def test_report_of_the_example(example_stats, tmp_path, capsys):
    assert main(["report", str(example_stats), "-o", str(tmp_path / "r")]) == 0
    png = (tmp_path / "r" / "wxstats_report.png").read_bytes()
    width, height = _png_size(png)
    assert width >= 1200 and height >= 400
    assert 0.02 < _ink(png) < 0.6, "figure is blank or solid"
    page = _parse((tmp_path / "r" / "wxstats_report.html").read_text())
    text = " ".join(page.text)
    for name in read_stats(example_stats).state.features:
        assert name in text
    assert "toa_downwelling_shortwave_flux" in text and "Pa" in text
    assert page.cells >= 18 * 10
    # the image is inlined, byte for byte the PNG written beside it
    assert len(page.images) == 1 and page.images[0].startswith("data:image/png;base64,")
    assert base64.b64decode(page.images[0].split(",", 1)[1]) == png
    assert "Warnings (0)" in text  # the example is clean
    assert "wrote" in capsys.readouterr().out


def test_report_of_100_variables_flags_the_suspicious_ones(tmp_path, capsys):
    write_synthetic(tmp_path / "s100.nc", n_vars=100)
    write_synthetic(tmp_path / "s17.nc", n_vars=17)
    assert main(["report", str(tmp_path / "s17.nc"), "-o", str(tmp_path / "r17")]) == 0
    assert main(["report", str(tmp_path / "s100.nc"), "-o", str(tmp_path / "r100")]) == 0
    out = capsys.readouterr().out
    png17 = (tmp_path / "r17" / "wxstats_report.png").read_bytes()
    png100 = (tmp_path / "r100" / "wxstats_report.png").read_bytes()
    # one row per variable: the figure grows with the variable count
    h17, h100 = _png_size(png17)[1], _png_size(png100)[1]
    assert h100 > 3 * h17 and h100 / 101 >= 18, "rows too thin to read"
    assert _ink(png100) > 0.02
    page = _parse((tmp_path / "r100" / "wxstats_report.html").read_text())
    text = " ".join(page.text)
    stats = read_stats(tmp_path / "s100.nc")
    assert all(name in text for name in stats.state.features)
    for name, message in SUSPICIOUS.items():
        assert any(name in line and message in line for line in out.splitlines()), name


def test_checks_flag_only_what_is_wrong(tmp_path):
    write_synthetic(tmp_path / "s.nc", n_vars=40)
    found = findings(read_stats(tmp_path / "s.nc"))
    flagged = {f.variable for f in found}
    assert flagged == set(SUSPICIOUS)
    for name, message in SUSPICIOUS.items():
        assert any(f.variable == name and message in f.message for f in found), name


def test_report_of_a_json_summary_shows_the_reference_values(example_stats, meps_small, tmp_path):
    written, found = write_report(example_stats.parent / "s.json", tmp_path)
    assert not found and _ink(written[0].read_bytes()) > 0.02
    cells = [c.removesuffix(" †") for c in _parse(written[1].read_text()).text]  # † = derived
    ref = meps_reference(meps_small)
    for f in (0, 6, 16):  # pres_0g, t_2, z_500: mean, std, min, diff_std/std as printed
        for value in (
            ref["mean"][f],
            ref["std"][f],
            ref["min"][f],
            ref["diff_std"][f] / ref["std"][f],
        ):
            assert f"{value:.6g}" in cells


def test_report_of_a_neurallam_static_folder(example_stats, tmp_path):
    """Only mean/std/diffs there: the figure says what is missing, the page still lists all."""
    written, found = write_report(example_stats.parent, tmp_path)
    assert [p.name for p in written] == ["wxstats_report.png", "wxstats_report.html"]
    assert not found
    assert _ink(written[0].read_bytes()) > 0.02
    text = " ".join(_parse(written[1].read_text()).text)
    # no datastore YAML beside this folder: variables are numbered
    assert "neural-lam-static" in text and "#16" in text and "†" in text


def test_report_of_unreadable_input_exits_2(tmp_path, capsys):
    (tmp_path / "bad.nc").write_text("nope")
    assert main(["report", str(tmp_path / "bad.nc"), "-o", str(tmp_path / "r")]) == 2
    assert "bad.nc" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_report_help_has_examples(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["report", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "examples:" in out and "wxstats report " in out


def test_a_nan_or_negative_std_is_warned_about_and_its_row_marked(example_stats, tmp_path, capsys):
    """A std that is NaN or negative poisons or flips every standardized value:
    the report warns as it does for a std of 0, and marks the row."""
    import shutil

    import torch

    static = tmp_path / "static"
    shutil.copytree(example_stats.parent, static)
    std = torch.load(static / "parameter_std.pt", weights_only=True)
    std[3], std[5] = float("nan"), -std[5]
    torch.save(std, static / "parameter_std.pt")
    diff_std = torch.load(static / "diff_std.pt", weights_only=True)
    diff_std[7] = -1.0
    torch.save(diff_std, static / "diff_std.pt")
    assert main(["report", str(static), "-o", str(tmp_path / "r")]) == 0
    warnings = [line for line in capsys.readouterr().out.splitlines() if "warning" in line]
    assert any("#3: std is nan: not a standard deviation" in line for line in warnings)
    assert any("#5: std is -" in line and "not a standard deviation" in line for line in warnings)
    assert any("#7: diff_std/std over 3h is -1: not a ratio" in line for line in warnings)
    assert len(warnings) == 3
    page = (tmp_path / "r" / "wxstats_report.html").read_text()
    marked = re.findall(r'<tr class="warn"><td>([^<]*)</td>', page)
    assert marked == ["#3", "#5", "#7"]


def test_the_terminal_table_is_one_per_split_and_cuts_no_number(tmp_path):
    """Every variable of a split in one table (12 tables for 6 variables and 2 splits
    before), each number whole however many difference columns, a climatology's
    groups named as months, the groups without data left out with a note."""
    import xarray as xr
    from gridded_data import hourly

    from wxstats.runtime.run import compute
    from wxstats.tools.report import format_table

    rng = np.random.default_rng(3)
    n = 24 * 70  # 2021-01-01 to 2021-03-11
    data = {f"v{i}": (("time", "y"), 1e5 + rng.standard_normal((n, 4)) / 7) for i in range(6)}
    store = tmp_path / "six.zarr"
    xr.Dataset(data, coords={"time": hourly(n)}).to_zarr(store)
    splits = ["train=2021-01-01/2021-02-15", "val=2021-02-16/2021-03-11"]
    stats = compute(str(store), splits=splits, diff_steps=(1, 3, 6, 24))
    text = format_table(stats)
    assert text.count("wxstats: xarray, split") == 2 and "…" not in text
    for split in ("train", "val"):
        stream = stats.streams[f"v5__{split}"]
        table = text.split(f"split {split}")[1]
        for value in (stream.mean[0], stream.std[0], stream.diff[24].std[0]):
            assert f"{value:.6g}" in table  # the whole number, as printed
        assert all(f"│ v{i} " in table for i in range(6))
    assert "diff 1d std/std" in text  # the span in the header, on one line
    monthly = format_table(compute(str(store), splits=splits[:1], by="month"))
    assert "│ v0 (month 1) " in monthly and "│ v0 (month 2) " in monthly
    assert "(month 3)" not in monthly and "60 rows without data left out (count 0)" in monthly


def _drawn_figure(path, tmp_path):
    """The report's figure of the statistics at ``path``, as ``wxstats report`` draws
    it (the same rows, labels and flags), drawn; and the page it writes."""
    from wxstats.tools.figure import render_figure
    from wxstats.tools.labels import with_labels

    written, found = write_report(path, tmp_path)
    stats, _ = with_labels(read_stats(path))
    flags = {(f.category, f.variable): [f.message] for f in found}
    fig = render_figure(stats.by_category(), flags, "title")
    fig.canvas.draw()
    return fig, written[1].read_text()


def _texts(fig) -> list:
    """Every visible, non-empty text of ``fig`` with its axes (``None``: the figure's)."""
    out = [(None, fig._suptitle)]
    for ax in fig.axes:
        labels = [*_drawn_ticks(ax.xaxis), *_drawn_ticks(ax.yaxis)]
        out += [(ax, t) for t in (*labels, ax.title, *ax.texts)]
        legend = ax.get_legend()
        out += [(ax, t) for t in (legend.get_texts() if legend else [])]
    return [(ax, t) for ax, t in out if t.get_visible() and t.get_text().strip()]


def _drawn_ticks(axis) -> list:
    """The tick labels matplotlib draws: those of ticks inside the view (a locator
    also places some beyond it, never drawn)."""
    lo, hi = sorted(axis.get_view_interval())
    slack = 1e-9 * max(abs(lo), abs(hi), 1e-300)
    ticks = [*axis.get_major_ticks(), *axis.get_minor_ticks()]
    return [t.label1 for t in ticks if lo - slack <= t.get_loc() <= hi + slack]


def _overlaps(fig) -> list[str]:
    """What covers what, by matplotlib's renderer: a legend over any panel (its bars,
    lines), a text over a panel it is not written in or over another text, a text
    cut by the figure's edge."""
    renderer = fig.canvas.get_renderer()
    found = []
    boxes = [(ax, t, t.get_window_extent(renderer)) for ax, t in _texts(fig)]
    for i, ax in enumerate(fig.axes):
        legend = ax.get_legend()
        if legend is not None:
            box = legend.get_window_extent(renderer)
            found += [f"legend of panel {i} over panel {j}" for j, other in enumerate(fig.axes)
                      if box.overlaps(other.bbox)]  # fmt: skip
    for ax, text, box in boxes:
        inside = text in ax.texts if ax is not None else False  # "no NaN" in its panel
        for j, other in enumerate(fig.axes):
            if not (inside and other is ax) and box.overlaps(other.bbox):
                found.append(f"{text.get_text()!r} over panel {j}")
        if not fig.bbox.contains(box.x0, box.y0) or not fig.bbox.contains(box.x1, box.y1):
            found.append(f"{text.get_text()!r} cut by the figure's edge")
    for a, (_, t1, b1) in enumerate(boxes):
        for _, t2, b2 in boxes[a + 1 :]:
            if b1.overlaps(b2):
                found.append(f"{t1.get_text()!r} over {t2.get_text()!r}")
    return found


def test_the_figure_has_no_overlaps(example_stats, tmp_path):
    """Legend, tick labels (a log axis beside the NaN panel), titles: none covers a bar,
    another panel or another text, for MEPS statistics with min/max and for a 100-row
    figure."""
    write_synthetic(tmp_path / "s100.nc", n_vars=100)
    for path in (example_stats, tmp_path / "s100.nc"):
        fig, _ = _drawn_figure(path, tmp_path / path.stem)
        assert fig.axes[1].get_legend() is not None
        assert _overlaps(fig) == [], path


def test_a_climatology_figure_names_its_groups(tmp_path):
    """Rows of a climatology named by their group (``t2m (hour 5)``, in hour order),
    the steps in order in the legend, nothing covering anything; on ERA5 2 m temperature
    when it is there, else on a synthetic hourly store."""
    import xarray as xr
    from gridded_data import hourly

    era5 = Path("/work/shared/data/era5_t2m_2019-03_uk.nc")
    if era5.exists():
        data = str(era5)
    else:
        rng = np.random.default_rng(5)
        values = 280 + rng.standard_normal((24 * 10, 3, 4))
        data = str(tmp_path / "t2m.zarr")
        xr.Dataset({"t2m": (("time", "y", "x"), values)}, coords={"time": hourly(240)}).to_zarr(
            data
        )
    out = tmp_path / "hour.nc"
    argv = ["compute", data, "--by", "hour", "--diff-steps", "1,6,24", "--output", str(out)]
    assert main([*argv, "--quiet"]) == 0
    fig, page = _drawn_figure(out, tmp_path / "r")
    rows = [t.get_text().split()[:3] for t in fig.axes[0].get_yticklabels()]
    assert [" ".join(r) for r in rows] == [f"t2m (hour {h})" for h in range(24)]
    legend = [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    assert legend == ["1h", "6h", "1d", "√2: uncorrelated steps"]
    assert "<td>t2m (hour 23)</td>" in page and "t2m_23" not in page
    assert _overlaps(fig) == []


def test_a_climatology_report_leaves_out_the_groups_without_data(tmp_path):
    """January data by month: the eleven other months (count 0) are neither rows nor
    warnings, the title says how many were left out; the rows that stay carry their
    own numbers (the float64 mean of the data)."""
    from gridded_data import gridded, write_zarr

    from reference import two_pass

    ds, truth = gridded()
    store = write_zarr(ds[["t2m", "z"]], tmp_path / "jan.zarr")
    out = tmp_path / "month.nc"
    assert main(["compute", str(store), "--by", "month", "--output", str(out), "--quiet"]) == 0
    fig, page = _drawn_figure(out, tmp_path / "r")
    rows = [t.get_text().split() for t in fig.axes[0].get_yticklabels()]
    assert [" ".join(r[:3]) for r in rows] == [
        "t2m (month 1)",
        "z_500 (month 1)",
        "z_850 (month 1)",
    ]
    mean = two_pass(truth["t2m"].ravel(), 0)[0]
    assert rows[0][3] == f"{mean:.4g}"
    assert "month 2" not in page and "no values at all" not in page
    assert "33 climatology groups without data left out (count 0)" in page
    assert _overlaps(fig) == []
