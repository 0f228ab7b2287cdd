"""The order tests/nn's tests run in, where it saves work without changing what they check."""

# tests/nn/test_zoo.py's two tests that read one network each, by name.
ONE_NETWORK = ("test_every_model_is_valid_onnx_with_the_shapes_it_reports",
               "test_every_model_runs_with_finite_outputs_that_depend_on_the_input")


def pytest_collection_modifyitems(items):
    """test_zoo.py's two tests of each network run one after the other, network by network,
    in the slots they had: the module keeps only the last two networks it built (memory), so
    run function by function every network was built twice, and one read from the onnx
    package's test data takes seconds to build again (onnx_densenet121: 4 s)."""
    slots = [k for k, item in enumerate(items)
             if item.path.name == "test_zoo.py"
             and getattr(item, "originalname", None) in ONE_NETWORK]
    chosen = [items[k] for k in slots]
    first: dict[str, int] = {}
    for item in chosen:
        first.setdefault(item.callspec.params["name"], len(first))
    chosen.sort(key=lambda item: first[item.callspec.params["name"]])  # stable
    for k, item in zip(slots, chosen, strict=True):
        items[k] = item
