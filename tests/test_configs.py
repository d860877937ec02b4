"""The typed pool configurations (:mod:`poolfuzz.harness.judge.config`): checked once, when built, and faithful to JSON."""

from __future__ import annotations

import dataclasses
import inspect
import json
from pathlib import Path

import pytest

from poolfuzz.harness.judge.config import PoolConfig, UntypedConfig, untyped_config
from poolfuzz.harness.judge.families import FAMILIES, family_unavailable, resolve
from poolfuzz.harness.judge.limits import SETTING, FamilyLimits, Limit, LimitError
from poolfuzz.harness.kits.kv.config import PagedKVConfig
from poolfuzz.harness.kits.mamba.config import HybridRowConfig
from poolfuzz.harness.kits.rows.config import RowConfig
from poolfuzz.harness.kits.scheduler.config import SchedulerConfig

CORPUS = Path(__file__).resolve().parent.parent / "corpus"


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_family_of_ours_declares_a_config_class_whose_fields_its_default_pool_takes(name: str) -> None:
    cls = FAMILIES[name].config_class
    assert issubclass(cls, PoolConfig) and not issubclass(cls, UntypedConfig), name
    assert cls.family == name
    if family_unavailable(name) is None:
        parameters = inspect.signature(resolve(FAMILIES[name].default)).parameters
        assert set(cls.limits().config) <= set(parameters), name


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_a_config_field_left_out_reads_as_the_default_pools_own_default(name: str) -> None:
    """A key a config was not given is not passed (the pool's default applies), yet drivers read the field:
    the two defaults must agree, or a driver would judge a pool built otherwise than it reads."""
    if family_unavailable(name) is not None:
        pytest.skip("its default target does not load here")
    parameters = inspect.signature(resolve(FAMILIES[name].default)).parameters
    for field in dataclasses.fields(FAMILIES[name].config_class):
        declared = parameters.get(field.name)
        if field.name.startswith("_") or declared is None or field.default is dataclasses.MISSING:
            continue
        pool_default = declared.default
        if isinstance(pool_default, tuple):
            pool_default = tuple(pool_default)
        assert pool_default is not inspect.Parameter.empty, (name, field.name, "the pool requires it")
        assert field.default == pool_default, (name, field.name, field.default, pool_default)


@pytest.mark.parametrize(
    ("build", "field", "words"),
    [
        (
            lambda: RowConfig(size="3", max_context_len=4),  # type: ignore[arg-type]
            "config.size",
            "must be an integer",
        ),
        (lambda: RowConfig(size=True, max_context_len=4), "config.size", "must be an integer"),
        (
            lambda: PagedKVConfig(size=8, page_size=2, need_sort="yes"),  # type: ignore[arg-type]
            "config.need_sort",
            "must be true or false",
        ),
        (
            lambda: PagedKVConfig(size=8, page_size=2, check_layout=1),  # type: ignore[arg-type]
            "config.check_layout",
            "true or false or null",
        ),
        (
            lambda: HybridRowConfig(size=2, max_context_len=4, mamba_size=2, conv_shape=(4, "x")),  # type: ignore[arg-type]
            "config.conv_shape",
            "a list of an integer",
        ),
        (lambda: RowConfig(size=-1, max_context_len=4), "config.size", "below the minimum 0"),
        (
            lambda: SchedulerConfig(size=4, max_context_len=8, page_size=4, kv_pages=1 << 19),
            "config: kv_pages x page_size",
            "exceeds the limit",
        ),
    ],
)
def test_a_config_built_in_code_is_refused_naming_the_field(build: object, field: str, words: str) -> None:
    with pytest.raises(LimitError) as caught:
        build()  # type: ignore[operator]
    assert caught.value.field == field and words in str(caught.value)


@pytest.mark.parametrize(
    ("config", "field", "words"),
    [
        ({"size": 4}, "config.max_context_len", "is missing"),
        ({"size": 4, "max_context_len": 8, "max_contxt_len": 8}, "config.max_contxt_len", "is not a config field"),
        ({"size": 4.0, "max_context_len": 8}, "config.size", "must be an integer"),
        ({"size": 4, "max_context_len": 8, "device": 0}, "config.device", "must be a string"),
    ],
)
def test_a_config_read_from_json_is_refused_naming_the_field(config: dict[str, object], field: str, words: str) -> None:
    with pytest.raises(LimitError) as caught:
        RowConfig.from_mapping(config)
    assert caught.value.field == field and words in str(caught.value)


def test_a_config_passes_its_constructor_exactly_the_keys_it_was_built_with() -> None:
    """A key left out stays the target's own default: a substitute (an upstream class) is called as before."""
    drawn = PagedKVConfig(size=8, page_size=2, kernel="vectorized")
    assert drawn.kwargs() == {"size": 8, "page_size": 2, "kernel": "vectorized", "device": "cpu"}
    assert drawn.check_layout is None and drawn.need_sort is False  # read as the pool's defaults
    moved = drawn.on_device("cuda:0").replaced(check_layout=False)
    assert moved.kwargs() == {"size": 8, "page_size": 2, "kernel": "vectorized", "device": "cuda:0", "check_layout": False}
    assert moved == PagedKVConfig(size=8, page_size=2, kernel="vectorized", device="cuda:0", check_layout=False)
    assert drawn.on_device("cpu") is drawn


def test_a_shape_is_a_tuple_in_the_config_and_a_list_in_json() -> None:
    config = HybridRowConfig.from_mapping({"size": 2, "max_context_len": 4, "mamba_size": 2, "conv_shape": [3, 2]})
    assert config.conv_shape == (3, 2) and config.temporal_shape == (4,)
    assert config.to_json()["conv_shape"] == [3, 2] and "temporal_shape" not in config.to_json()


def test_page_size_is_read_in_one_place_for_families_with_and_without_pages() -> None:
    assert PagedKVConfig(size=8, page_size=4).tokens_per_page == 4
    assert RowConfig(size=2, max_context_len=4).tokens_per_page == 1


def test_every_committed_trace_config_round_trips_through_its_config_class_unchanged() -> None:
    # corpus/found/ is not committed: what local fuzz runs saved there, under whatever poolfuzz made them
    traces = sorted(path for path in CORPUS.rglob("*.json") if not path.is_relative_to(CORPUS / "found"))
    assert traces, "the corpus holds traces"
    checked = 0
    for path in traces:
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or data.get("family") not in FAMILIES or "config" not in data:
            continue
        config = FAMILIES[data["family"]].configured(data["config"])
        assert config.to_json() == {**data["config"], "device": config.device}, path
        checked += 1
    assert checked >= 20


def test_a_plug_in_kit_without_a_config_class_gets_one_that_reads_as_a_mapping() -> None:
    row = FamilyLimits({"size": Limit(0, 64), "mode": SETTING})
    cls = untyped_config("tests.configs.plugin", row)
    config = cls.from_mapping({"size": 3})
    assert config["size"] == 3 and config.get("mode", "fast") == "fast" and "mode" not in config
    assert config.kwargs() == {"size": 3, "device": "cpu"}
    with pytest.raises(LimitError, match="exceeds the limit 64"):
        cls.from_mapping({"size": 65})
