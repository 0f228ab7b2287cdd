"""More public board programs ported call by call (examples/ports/): OpenExplorer's
multi-model batch and tensor tutorial, and a multi-threaded classifier in the samples'
style; each gives what the float model or reference gives."""

import pytest

from emu.runtime import session

from .port_kit import PHOTOS, assert_float_top5, nv12_classifier, photo, port


@pytest.fixture(scope="module")
def classifiers(tmp_path_factory):
    """ResNet-18 and MobileNetV2 for NV12 input, each in its own file, as the sample's
    GoogLeNet and MobileNetV2 are."""
    folder = tmp_path_factory.mktemp("oe_ports")
    return [nv12_classifier(name, folder) for name in ("resnet18", "mobilenetv2")]


def test_the_multi_model_batch_port_gives_both_float_models_top5(classifiers, capsys):
    multi_model_batch = port("multi_model_batch")
    (path_a, model_a), (path_b, model_b) = classifiers
    # one picture for both, as the sample gives its zebra twice (the seeded, untrained
    # weights give close scores; on this photo int8 keeps both models' top five classes)
    pictures = ("astronaut.png", "astronaut.png")
    with session.Session() as sess:
        live = sess.soc.pool.live_buffers
        top_a, top_b = multi_model_batch.run_multi_model_batch(
            f"{path_a},{path_b}", ",".join(str(PHOTOS / p) for p in pictures), 5,
            model_a.graph.tensors[model_a.graph.inputs[0]].shape[-1])
        assert sess.soc.pool.live_buffers == live  # the four buffers freed
    assert_float_top5(model_a, photo(pictures[0]), top_a)
    assert_float_top5(model_b, photo(pictures[1]), top_b)
    out = capsys.readouterr().out
    assert f"googlenet class result id: {top_a[0].id}" in out
    assert f"mobilenetv2 class result id: {top_b[0].id}" in out
