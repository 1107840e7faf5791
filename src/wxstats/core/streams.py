"""What a source declares of its streams: their labels and what to reduce.

A stream is one group of features reduced together. Its :class:`StreamLayout`
holds its labels as the data says them: the variable and split it is of, its
role (:data:`~wxstats.core.conventions.ROLES`), its feature dimensions with
their coordinate values (a level, a ``*_feature`` name; a climatology's
``month`` or ``hour`` group and a year, :data:`GROUP_DIMS`, are dimensions like
the others), whether each feature has its own unit, and the dimensions it was
pooled over; never a file's layout (writers derive names from these). A
:class:`StreamSpec` is what a source hands the run: the labels, the flat
features with their units and long names, the difference steps, the weighting.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from wxstats.core.conventions import feature_dim, long_name_coord, units_coord

GROUP_DIMS = ("month", "hour", "year")
"""Feature dimensions of ``--by`` (a climatology's group, a year): groups, not levels."""
POOLED_ATTR = "pooled over"
"""The attribute of a pooled stream's statistics naming the dimensions pooled over."""


@dataclass(frozen=True)
class StreamLayout:
    """A stream's labels: what its flat statistics are of, as the data says.

    ``variable`` is what the stream is of (a dataset variable; MEPS's and
    anemoi's stacks of variables are named by their role), ``split`` the split
    and ``role`` what it is to a model (:data:`~wxstats.core.conventions.ROLES`).
    ``features`` are the C-order product of ``feature_dims`` (none: one scalar
    feature), which may lead with a group dimension (:data:`GROUP_DIMS`);
    ``coords`` are labels along them (name -> (dims, values) or (dims, values,
    attributes)). ``units_per_feature``: a stack of variables, each feature with
    its own unit (MEPS's state), rather than one variable with one unit. Writers
    derive file names, flat feature names and where units go from these.
    """

    variable: str
    split: str
    feature_dims: tuple[str, ...] = ()
    feature_shape: tuple[int, ...] = ()
    coords: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    role: str = "state"
    units_per_feature: bool = False
    attrs: dict[str, str] = field(default_factory=dict)
    """Attributes of every statistic of the stream in a file (``pooled over``)."""

    @property
    def group_dims(self) -> tuple[str, ...]:
        """The feature dimensions that are a climatology's groups or years."""
        return tuple(d for d in self.feature_dims if d in GROUP_DIMS)

    @property
    def pooled_dims(self) -> tuple[str, ...]:
        """The dimensions the stream's features were pooled over (``--pool``)."""
        text = self.attrs.get(POOLED_ATTR, "")
        return tuple(d.strip() for d in text.split(",") if d.strip())

    def values(self, dim: str) -> np.ndarray:
        """The coordinate values along ``dim`` (positions where it has none)."""
        if dim in self.coords and tuple(self.coords[dim][0]) == (dim,):
            return np.asarray(self.coords[dim][1])
        return np.arange(self.feature_shape[self.feature_dims.index(dim)])

    def shaped(self, values: Any, lead: tuple[int, ...] = ()) -> np.ndarray:
        """Flat per-feature ``values`` (after ``lead`` leading axes) along the labels."""
        array = np.asarray(values)
        return array.reshape(tuple(lead) + tuple(self.feature_shape))


def listed_features(role: str, split: str, features: list[str]) -> StreamLayout:
    """The labels of a stack of named variables of ``role`` (MEPS's state, an
    anemoi dataset's data), along ``{role}_feature``, each with its own unit:
    what a source hands over; units and long names stay in its :class:`StreamSpec`."""
    dim = feature_dim(role)
    return StreamLayout(
        variable=role,
        split=split,
        feature_dims=(dim,),
        feature_shape=(len(features),),
        coords={dim: ((dim,), np.asarray(features, dtype=object))},
        role=role,
        units_per_feature=True,
    )


def with_feature_units(
    layout: StreamLayout, units: list[str], long_names: list[str]
) -> StreamLayout:
    """``layout`` with each feature's unit and long name as coordinates along its
    one feature dimension (``state_feature_units``), where its units are per
    feature and it lacks them: how a file and the labelled view carry them."""
    if not layout.units_per_feature or len(layout.feature_dims) != 1:
        return layout
    dim = layout.feature_dims[0]
    coords = dict(layout.coords)
    if units_coord(dim) not in coords:
        coords[units_coord(dim)] = ((dim,), np.asarray(units, dtype=object))
    if long_names and long_name_coord(dim) not in coords:
        coords[long_name_coord(dim)] = ((dim,), np.asarray(long_names, dtype=object))
    return replace(layout, coords=coords)


def flat_layout(
    category: str, split: str, features: list[str], units: list[str], long_names: list[str]
) -> StreamLayout:
    """:func:`listed_features` with the units and long names as coordinates
    (a file's layout: readers of files that keep flat names only)."""
    return with_feature_units(listed_features(category, split, features), units, long_names)


@dataclass(frozen=True)
class Pooling:
    """A stream's features taken together over some of its feature dimensions
    (``--pool level``): one pooled statistic per group of features, written as
    the stream ``name`` laid out along the remaining dimensions."""

    name: str
    dims: tuple[str, ...]
    groups: tuple[tuple[int, ...], ...]
    """The features of the stream in each pooled feature (C order of the rest)."""
    features: list[str]
    units: list[str]
    long_names: list[str]
    layout: StreamLayout


@dataclass(frozen=True)
class StreamSpec:
    """One group of features reduced together, as a source declares it."""

    name: str
    features: list[str]
    units: list[str]
    diff_steps: tuple[int, ...] = ()
    long_names: list[str] = field(default_factory=list)
    layout: StreamLayout | None = None
    weighted: bool = False
    """Its blocks carry grid-point weights (``--weights``): weighted means and stds."""
    cell_grid_points: int = 0
    """Also sum every grid point over time (its time means, makani's ``time_means``):
    the number of grid points, 0 for none."""
    diff_span: dict[int, int] = field(default_factory=dict)
    """Seconds of the time span of each difference step, where the source knows it
    (see :attr:`StreamStats.diff_span`)."""
    pooled: Pooling | None = None
    """Also the statistics of groups of its features taken together (``--pool``)."""
    order: int = 2
    """The highest power of its values summed (``--moments``: 4 for the skewness
    and kurtosis); 2 keeps the sums and files of the mean and std alone."""
