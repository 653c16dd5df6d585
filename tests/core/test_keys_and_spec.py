from __future__ import annotations

from operator import add, mul

import pytest

from kernel_cluster.core.keys import key_group, key_split, validate_key
from kernel_cluster.core.sizeof import sizeof
from kernel_cluster.core.spec import (
    NO_DEPENDENCIES,
    Call,
    GraphError,
    Ref,
    TaskSpec,
    evaluate,
    flatten_keys,
    graph_order,
    pack_results,
    parse_graph,
)


@pytest.mark.parametrize(
    "key, prefix",
    [
        ("inc-3f2a9c1b5d6e7f8091a2b3c4d5e6f708", "inc"),
        (("x-3f2a9c1b5d6e7f8091a2b3c4d5e6f708", 0), "x"),
        ("hello-world-1", "hello-world"),
        ("x", "x"),
        ("x-1-2-3", "x"),
        ("read_csv-3f2a9c1b", "read_csv"),
        ("3f2a9c1b5d6e7f8091a2b3c4d5e6f708", "data"),
        ("('x-2', 1)", "x"),
        (b"hello-world-1", "hello-world"),
        ("<foo.bar.MyClass object at 0x7f00aa>", "MyClass"),
        (None, "Other"),
        ((), "Other"),
        ("x-abcdefab", "x"),
        # eight letters starting with a-f end a name, as in dask's key_split
        ("sum-aggregate-finalize-hlgfinalizecompute-cce864f07f0f418892e5", "sum-aggregate"),
        (("random_sample-06565e0063d197f264bf50d14b112fdb", 0, 0), "random_sample"),
        ("hello-world-greeting-1", "hello-world-greeting"),
    ],
)
def test_key_split(key, prefix):
    assert key_split(key) == prefix


def test_key_group_is_collection_name_for_tuples():
    assert key_group(("x-3f2a9c1b", 4)) == "x-3f2a9c1b"
    assert key_group("inc-3f2a9c1b") == "inc"


@pytest.mark.parametrize("bad", [["a"], {"a": 1}, (), ("a", ["b"]), object()])
def test_validate_key_rejects_unusable_keys(bad):
    with pytest.raises(TypeError, match="key"):
        validate_key(bad)


def test_parse_the_seed_graph_and_evaluate():
    dsk = {"a": (add, 1, 2), "b": (add, 3, "a"), "c": (mul, "a", "b")}
    specs = parse_graph(dsk)
    assert specs["a"].dependencies == frozenset()
    assert specs["c"].dependencies == {"a", "b"}
    data = {"a": evaluate(specs["a"].expr, {})}
    data["b"] = evaluate(specs["b"].expr, data)
    assert evaluate(specs["c"].expr, data) == 18


def test_nested_tasks_lists_dicts_and_tuple_keys():
    dsk = {
        ("x", 0): 10,
        ("x", 1): (add, ("x", 0), 1),
        "total": (sum, [("x", 0), ("x", 1), (mul, 2, ("x", 0))]),
        "d": (dict, {"k": ("x", 1)}),
        "lit": (len, ("not", "a", "task")),
        "alias": "total",
    }
    specs = parse_graph(dsk)
    assert specs["total"].dependencies == {("x", 0), ("x", 1)}
    assert specs["alias"].dependencies == {"total"}
    data = {("x", 0): 10, ("x", 1): 11}
    assert evaluate(specs["total"].expr, data) == 41
    assert evaluate(specs["d"].expr, data) == {"k": 11}
    assert evaluate(specs["lit"].expr, data) == 3
    assert evaluate(specs["alias"].expr, {"total": 41}) == 41
    assert evaluate(specs[("x", 0)].expr, {}) == 10


def test_tasks_without_inputs_share_one_empty_dependency_set():
    specs = parse_graph({"a": (add, 1, 2), "b": 5, "c": (add, "a", "b")})
    assert specs["a"].dependencies is specs["b"].dependencies is NO_DEPENDENCIES
    assert TaskSpec(None, frozenset()).dependencies is NO_DEPENDENCIES  # also when unpickled


def test_call_without_references_runs_directly():
    call = Call(add, (1, 2))
    assert not call.nested
    assert Call(add, (Ref("a"), 2)).nested
    assert Call(sum, ([Ref("a")],)).nested
    assert evaluate(Call(add, (1, 2)), {}) == 3


def test_cycle_is_reported_with_its_path():
    dsk = {"a": (add, "c", 1), "b": (add, "a", 1), "c": (add, "b", 1), "d": 1}
    with pytest.raises(GraphError, match="cycle") as info:
        parse_graph(dsk)
    assert set(info.value.keys) >= {"a", "b", "c"}
    with pytest.raises(GraphError, match="itself"):
        parse_graph({"a": (add, "a", 1)})


def test_deep_chain_checks_without_recursion():
    n = 20_000
    dsk = {"k0": 0, **{f"k{i}": (add, f"k{i - 1}", 1) for i in range(1, n)}}
    specs = parse_graph(dsk)
    order = graph_order(specs, [f"k{n - 1}"])
    assert order["k0"] < order[f"k{n - 1}"]


def test_graph_order_finishes_a_branch_before_the_next():
    dsk = {
        "a1": 1, "a2": (add, "a1", 1),
        "b1": 1, "b2": (add, "b1", 1),
        "out": (add, "a2", "b2"),
    }  # fmt: skip
    order = graph_order(parse_graph(dsk), ["out"])
    assert order["a1"] < order["a2"] < order["b1"] < order["b2"] < order["out"]


def test_not_a_dict():
    with pytest.raises(TypeError, match="dict"):
        parse_graph([("a", 1)])


def test_flatten_and_pack_keep_the_shape():
    keys = ["a", ["b", ["c"]], ("x", 1)]
    assert flatten_keys(keys) == ["a", "b", "c", ("x", 1)]
    data = {"a": 1, "b": 2, "c": 3, ("x", 1): 4}
    assert pack_results(keys, data) == [1, [2, [3]], 4]
    assert pack_results(("x", 1), data) == 4


def test_sizeof_is_fair_for_common_values():
    np = pytest.importorskip("numpy")
    assert sizeof(np.zeros(1000)) == 8000
    assert sizeof(b"x" * 1000) >= 1000
    big = list(range(100_000))
    assert 800_000 < sizeof(big) < 8_000_000
    assert sizeof({"a": np.zeros(100)}) > 800


def test_sizeof_pandas_reads_the_column_arrays():
    pd = pytest.importorskip("pandas")
    np = pytest.importorskip("numpy")
    n = 10_000
    frame = pd.DataFrame(
        {
            "i": np.arange(n),
            "f": np.ones(n),
            "s": ["word"] * n,
            "c": pd.Categorical(["a", "b"] * (n // 2)),
        }
    )
    multi = frame.set_index(["i", "s"])
    for obj in [frame, frame.f, frame.s, frame.groupby("c", observed=True).f.sum(), multi]:
        assert sizeof(obj) == int(np.sum(obj.memory_usage(deep=True)))
    # numpy object columns and indexes: their Python objects estimated from a sample
    objects = pd.DataFrame(
        {"o": np.array([f"text {i}" for i in range(n)], dtype=object)},
        index=pd.Index([f"row {i}" for i in range(n)], dtype=object),
    )
    exact = int(objects.memory_usage(deep=True).sum())
    assert 0.8 * exact < sizeof(objects) < 1.25 * exact


def test_keys_with_lone_surrogates_are_refused_and_valid_text_is_not():
    """Issue 32.3: such text has no UTF-8 form; no message or view could carry it."""
    import pytest

    from kernel_cluster.core.keys import validate_key

    for bad in ("x-\ud800", ("x", "\udc80"), ("ok", ("nested-\udfff", 1))):
        with pytest.raises(ValueError, match="lone surrogate"):
            validate_key(bad)
    for good in ("ключ", ("鍵", 0), "emoji-\U0001f600", b"\xff\xfe"):
        validate_key(good)
