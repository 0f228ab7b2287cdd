"""C programs against libemu_rt: the samples in c/samples built with the system compiler and
run as processes, held to the Python ports of the same programs (examples/ports) in
outputs and, to the picosecond, in simulated time; runs repeated byte for byte; misuse
answered with the APIs' codes; the headers' status values held to the Python API's."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from emu.capi import build
from emu.nn import execute
from emu.runtime import hbdnn, hbsys
from emu.soc.config import load_config
from tests.capi.conftest import CC, CXX, ROOT, SAMPLES, python_run, run
from tests.runtime.port_kit import (
    PHOTOS,
    assert_float_top5,
    nv12,
    nv12_classifier,
    photo,
    port,
)
from tests.runtime.test_ports import YOLO_SIZE, build_detectors, mid_threshold

pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler (cc or gcc) on this machine")
PICTURES = ("chelsea.png", "coffee.png", "astronaut.png", "motorcycle_left.png")


@pytest.fixture(scope="module")
def models(built):
    folder, _ = built
    made = {}
    for key, zoo_name, int32 in (("float", "mobilenetv1", False), ("int32", "mobilenetv2", True),
                                 ("int32b", "resnet18", True)):
        (folder / key).mkdir()
        made[key] = nv12_classifier(zoo_name, folder / key, int32_scores=int32)
    return made


@pytest.fixture(scope="module")
def pictures(built):
    """scikit-image photos at the classifiers' size, as PPM files the C samples read."""
    folder, _ = built
    paths = {}
    for name in PICTURES:
        path = folder / f"{Path(name).stem}.ppm"
        assert cv2.imwrite(str(path), photo(name))
        paths[name] = path
    return paths


def anonymous(stats):
    """The stats with the host threads' names left out (C threads are numbered, the
    Python ports name theirs)."""
    for thread in stats["host"]["threads"]:
        thread.pop("name")
    return stats


def test_the_status_values_of_the_headers_are_the_python_apis(built, tmp_path):
    _, compile_c = built
    names = [n for n in dir(hbsys) if n.startswith("HB_SYS_") and isinstance(
        getattr(hbsys, n), int) and "CACHE" not in n]
    names += [n for n in dir(hbdnn) if re.fullmatch(r"HB_DNN_[A-Z_]+", n) and n not in (
        "HB_DNN_TENSOR_MAX_DIMENSIONS",) and isinstance(getattr(hbdnn, n), int)
        and not n.startswith(("HB_DNN_LOG_", "HB_DNN_PRIORITY", "HB_DNN_VERSION"))]
    source = tmp_path / "values.c"
    source.write_text('#include <stdio.h>\n#include "hb_dnn.h"\nint main(void) {\n'
                      + "".join(f'  printf("{n} %d\\n", (int)({n}));\n' for n in names)
                      + "  return 0;\n}\n")
    printed = run(compile_c(source, "values")).stdout.split("\n")
    values = dict(line.split() for line in printed if line)
    want = {n: str(getattr(hbdnn if n.startswith("HB_DNN") else hbsys, n)) for n in names}
    assert values == want
    assert len(values) > 30


def test_the_classifier_gives_the_python_ports_top5_and_timeline(built, models, pictures):
    _, compile_c = built
    exe = compile_c(SAMPLES / "cls_perception_nv12.c", "cls_perception_nv12")
    path, model = models["float"]
    picture = pictures["chelsea.png"]
    report_file = picture.parent / "cls.json"
    done = run(exe, path, picture, env={"EMU_REPORT": str(report_file)})
    assert done.returncode == 0, done.stderr
    printed = [line for line in done.stdout.splitlines() if line.startswith("TOP")]

    cls = port("cls_perception_nv12")
    bgr = cv2.imread(str(picture), cv2.IMREAD_COLOR)
    top, report = python_run(lambda: cls.classify(str(path), bgr, 5))
    assert printed == [f"TOP {r} result id: {i} score {s:.6f}" for r, (i, s) in enumerate(top)]
    assert_float_top5(model, bgr, top)  # and the float model agrees
    c_report = json.loads(report_file.read_text())
    assert c_report["stats"] == report["stats"]  # every figure, to the picosecond
    assert c_report["results"]["simulated_ps"] == report["results"]["simulated_ps"] > 0
    latency = re.search(r"inference latency: ([0-9.]+) ms", done.stdout)
    assert latency and 0 < float(latency.group(1)) < c_report["results"]["simulated_ms"]


def _workers(pictures, models_named):
    """Eight workers over two models, priorities alternating, two frames each."""
    return [(models_named[k % 2], 255 if k % 3 == 0 else 0,
             [pictures[PICTURES[(k + f) % len(PICTURES)]] for f in range(2)])
            for k in range(8)]


def test_eight_threads_on_both_cores_repeat_exactly_and_match_the_python_program(
        built, models, pictures):
    folder, compile_c = built
    exe = compile_c(SAMPLES / "multi_thread_cls.c", "multi_thread_cls")
    files = [models["int32"][0], models["int32b"][0]]
    names = [models["int32"][1].name, models["int32b"][1].name]
    workers = _workers(pictures, names)
    args = [f"--model_file={files[0]},{files[1]}", "--top_k", "5"]
    for name, priority, frames in workers:
        args += ["--worker", f"{name}:{priority}:{','.join(map(str, frames))}"]
    outputs = []
    for k in range(3):
        env = {"EMU_REPORT": str(folder / f"mt{k}.json"),
               "EMU_TRACE": str(folder / f"mt{k}.trace.json")}
        done = run(exe, *args, env=env)
        assert done.returncode == 0, done.stderr
        outputs.append((done.stdout, (folder / f"mt{k}.json").read_bytes(),
                        (folder / f"mt{k}.trace.json").read_bytes()))
    assert outputs[0] == outputs[1] == outputs[2]  # stdout, report and trace, byte for byte

    mtc = port("multi_thread_cls")
    frames = [(name, priority, [cv2.imread(str(p), cv2.IMREAD_COLOR) for p in pictures_])
              for name, priority, pictures_ in workers]
    (ran, _), report = python_run(
        lambda: mtc.run_workers(",".join(map(str, files)), frames, 5))
    c_report = json.loads(outputs[0][1])
    assert anonymous(c_report["stats"]) == anonymous(report["stats"])
    threads = c_report["stats"]["host"]["threads"]
    assert sum(1 for t in threads if t["api_calls"]) >= 9  # main and the eight workers
    bpu = c_report["stats"]["bpu"]
    assert bpu["tasks_done"] == 16 and min(bpu["busy_ps"]) > 0, bpu  # both cores worked
    want = [f"{arg.name} frame {f}: class {top[0].id} score {top[0].score:.6f}"
            for arg in ran for f, top in enumerate(arg.results)]
    got = [line.rsplit(",", 1)[0] for line in outputs[0][0].splitlines()
           if " frame " in line]
    assert got == want


def test_misuse_from_c_returns_the_apis_codes(built, models, tmp_path):
    _, compile_c = built
    exe = compile_c(Path(__file__).with_name("misuse.c"), "misuse")
    garbage = tmp_path / "garbage.hbm"
    garbage.write_bytes(bytes(range(256)) * 8)
    done = run(exe, models["float"][0], garbage, env={"HB_DNN_LOG_LEVEL": "0"})
    assert done.returncode == 0, done.stderr
    got = dict(line.split() for line in done.stdout.splitlines())
    s, d = hbsys, hbdnn
    want = {
        "alloc_null": s.HB_SYS_INVALID_ARGUMENT, "alloc_zero": s.HB_SYS_INVALID_ARGUMENT,
        "alloc": 0, "flush_bent_pointer": s.HB_SYS_INVALID_MEMORY,
        "flush_wrong_size": s.HB_SYS_INVALID_MEMORY, "flush_bad_flag": s.HB_SYS_INVALID_ARGUMENT,
        "flush_null": s.HB_SYS_INVALID_ARGUMENT, "write_null_source": s.HB_SYS_INVALID_ARGUMENT,
        "write_too_long": s.HB_SYS_INVALID_ARGUMENT, "write": 0, "read": 0, "read_equal": 0,
        "free": 0, "free_again": s.HB_SYS_INVALID_MEMORY,
        "flush_freed_copy": s.HB_SYS_INVALID_MEMORY,
        "unregister_allocated": s.HB_SYS_WRONG_RELEASE, "free_allocated": 0,
        "init_null_handle": d.HB_DNN_INVALID_ARGUMENT, "init_null_name": d.HB_DNN_INVALID_ARGUMENT,
        "init_zero_files": d.HB_DNN_INVALID_ARGUMENT,
        "init_missing_file": d.HB_DNN_CAN_NOT_OPEN_FILE,
        "init_garbage_file": d.HB_DNN_INVALID_MODEL,
        "model_handle_bad_packed": d.HB_DNN_INVALID_PACKED_DNN_HANDLE,
        "input_count_bad_handle": d.HB_DNN_INVALID_DNN_HANDLE,
        "wait_bad_task": d.HB_DNN_INVALID_TASK_HANDLE,
        "release_null_task": d.HB_DNN_INVALID_TASK_HANDLE,
        "release_null_packed": d.HB_DNN_INVALID_PACKED_DNN_HANDLE,
        "init": 0, "names": 0, "model_handle_null_name": d.HB_DNN_INVALID_ARGUMENT,
        "model_handle_unknown_name": d.HB_DNN_INVALID_ARGUMENT, "model_handle": 0,
        "input_count_null_out": d.HB_DNN_INVALID_ARGUMENT,
        "properties_bad_index": d.HB_DNN_INVALID_ARGUMENT,
        "properties_null": d.HB_DNN_INVALID_ARGUMENT, "input_properties": 0,
        "output_properties": 0, "input_alloc": 0, "output_alloc": 0,
        "infer_null_ctrl": d.HB_DNN_INVALID_ARGUMENT,
        "infer_null_output": d.HB_DNN_INVALID_ARGUMENT,
        "infer_bad_model": d.HB_DNN_INVALID_DNN_HANDLE,
        "infer_bad_core": d.HB_DNN_INVALID_ARGUMENT,
        "infer_bad_priority": d.HB_DNN_INVALID_ARGUMENT,
        "infer_foreign_memory": d.HB_DNN_INVALID_ARGUMENT, "infer": 0,
        "free_memory_in_use": s.HB_SYS_MEM_IN_USE,
        "release_packed_running": d.HB_DNN_MODEL_IS_RUNNING, "wait_bad_timeout_ok": 0,
        "release_task": 0, "release_task_again": d.HB_DNN_INVALID_TASK_HANDLE,
        "wait_released_task": d.HB_DNN_INVALID_TASK_HANDLE, "free_input": 0,
        "infer_freed_input": d.HB_DNN_INVALID_ARGUMENT, "free_output": 0, "release_packed": 0,
        "release_packed_again": d.HB_DNN_INVALID_PACKED_DNN_HANDLE,
        "model_handle_released": d.HB_DNN_INVALID_PACKED_DNN_HANDLE,
        "input_count_released": d.HB_DNN_INVALID_DNN_HANDLE, "error_text": 0, "cpu_work": 0,
        "now_positive": 0}
    assert got == {k: str(v) for k, v in want.items()}
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(("variable", "value"), [
    ("EMU_SET", "vdsp.freq_hz=800"), ("EMU_SET", "no.such_key=1"),
    ("EMU_PRESET", "no_such_chip"), ("EMU_CONFIG", "/nonexistent/hw.toml")])
def test_a_configuration_the_emulator_refuses_stops_the_program_with_one_line(
        built, models, pictures, variable, value, tmp_path):
    _, compile_c = built
    exe = compile_c(SAMPLES / "cls_perception_nv12.c", "cls_for_config")
    report = tmp_path / "report.json"
    done = run(exe, models["float"][0], pictures["chelsea.png"],
               env={variable: value, "EMU_REPORT": str(report)})
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"emu: {variable}: "), done.stderr
    assert not report.exists()


def test_the_hardware_of_the_environment_is_the_one_simulated(built, models, pictures,
                                                              tmp_path):
    _, compile_c = built
    exe = compile_c(SAMPLES / "cls_perception_nv12.c", "cls_for_hardware")
    times = []
    for setting in ("", "bpu.freq_hz=500MHz"):
        report = tmp_path / f"r{len(times)}.json"
        done = run(exe, models["float"][0], pictures["chelsea.png"],
                   env={"EMU_SET": setting, "EMU_REPORT": str(report)})
        assert done.returncode == 0, done.stderr
        document = json.loads(report.read_text())
        assert document["provenance"]["overrides"] == setting.split()
        times.append(document["results"]["simulated_ps"])
    assert times[1] > times[0]  # a slower BPU, a longer run


def test_cc_flags_from_the_cli(built):
    done = subprocess.run([sys.executable, "-m", "emu", "cc-flags"], capture_output=True,
                          text=True, env=os.environ, check=True)
    assert f"-I{ROOT / 'c' / 'include'}" in done.stdout and "-lemu_rt" in done.stdout
    bad = subprocess.run([sys.executable, "-m", "emu", "cc-flags"], capture_output=True,
                         text=True, env={**os.environ, "EMU_CAPI_DIR": "/proc/no/such"})
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


@pytest.fixture(scope="module")
def detector(built):
    """The RDK YOLOv8n build of tests/runtime/test_ports.py (NV12, float classes, int32
    boxes) at YOLO_SIZE, and a picture of that size."""
    folder, _ = built
    (folder / "yolo").mkdir()
    path, model = build_detectors(folder / "yolo", ("rdk",))["rdk"]
    bgr = cv2.resize(cv2.imread(str(PHOTOS / "chelsea.png")), (YOLO_SIZE, YOLO_SIZE))
    picture = folder / "chelsea_yolo.ppm"
    assert cv2.imwrite(str(picture), bgr)
    return path, model, picture


def test_the_yolov8_detector_finds_the_python_ports_boxes_in_the_same_time(built, detector):
    _, compile_c = built
    exe = compile_c(SAMPLES / "yolov8_detect_nv12.c", "yolov8_detect_nv12")
    path, model, picture = detector
    bgr = cv2.imread(str(picture), cv2.IMREAD_COLOR)
    (name,) = model.graph.inputs
    threshold = mid_threshold(execute.run(model.quant, {name: nv12(bgr)}))
    report_file = picture.parent / "yolo.json"
    done = run(exe, path, picture, repr(threshold), "0.7",
               env={"EMU_REPORT": str(report_file)})
    assert done.returncode == 0, done.stderr

    yolo = port("yolov8_detect_nv12")
    (rc, found), report = python_run(lambda: yolo.detect(str(path), bgr, threshold, 0.7))
    assert rc == 0 and len(found) >= 10
    assert done.stdout.splitlines() == [
        f"class {c} score {s:.3f} box ({x1:.1f}, {y1:.1f}, {x2:.1f}, {y2:.1f})"
        for c, s, x1, y1, x2, y2 in found]
    assert json.loads(report_file.read_text())["stats"] == report["stats"]


def test_the_readmes_c_lines_print_the_top5_and_the_simulated_latency(built, tmp_path):
    """The README's three lines as written, run in a folder of their own (the sample's path
    made absolute there)."""
    readme = (ROOT / "README.md").read_text()
    block = next(b for b in re.findall(r"```sh\n(.*?)```", readme, flags=re.S)
                 if "emu cc-flags" in b)
    assert len(block.strip().splitlines()) == 3
    script = block.replace("c/samples/", f"{SAMPLES}/")
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    tops = [line for line in done.stdout.splitlines() if line.startswith("TOP ")]
    assert [t.split()[1] for t in tops] == ["0", "1", "2", "3", "4"]
    assert re.search(r"inference latency: 0\.\d+ ms \(simulated\)", done.stdout)


@pytest.mark.skipif(CXX is None, reason="no C++ compiler (c++ or g++) on this machine")
def test_a_cpp_program_with_threads_callbacks_and_declared_cpu_work(built, models):
    folder, _ = built
    exe = folder / "threads_cpp"
    subprocess.run([CXX, "-std=c++17", "-O1", "-Wall", "-Werror",
                    str(Path(__file__).with_name("threads.cpp")), *build.flags().split(), "-ldl",
                    "-o", str(exe)], check=True, capture_output=True, text=True)
    runs = {}
    for setting in ("", "cpu.freq_hz=1GHz"):
        done = run(exe, models["float"][0], env={"EMU_SET": setting})
        assert done.returncode == 0, done.stderr
        assert run(exe, models["float"][0], env={"EMU_SET": setting}).stdout == done.stdout
        runs[setting] = done.stdout.splitlines()
    lines = runs[""]
    # the task-done callback ran at the completion (before the wait returned), got the
    # task's status, could call the runtime and start a thread that calls it; a thread
    # started behind the library's back (libc's own pthread_create), which it cannot place
    # in the session, is refused with the wrong-thread code
    assert lines[6] == (f"callback rc 0 status 0 flush 0 helper 0 stranger "
                        f"{hbsys.HB_SYS_WRONG_THREAD} at_or_before_wait 1")
    # emuCpuWork: 1.5 M A55 cycles at the configured clock
    for setting, text in runs.items():
        freq = load_config("j5", None, setting.split()).soc.cpu.freq_hz
        assert text[0] == f"cpu work rc 0 took {round(1_500_000 / freq * 1e12)} ps"
    # four std::threads, one inference each: two run at once on the two BPU cores, two wait
    latency = sorted(int(line.split()[-1]) for line in lines[1:5])
    alone = int(lines[5].split()[-1])
    assert all(" rc 0 " in line for line in lines[1:5])
    assert latency[1] < 1.01 * alone and 1.8 * alone < latency[2] <= latency[3] < 2.2 * alone


def test_random_call_sequences_from_c_get_the_apis_codes_and_never_crash(built, models,
                                                                         tmp_path):
    """The fuzz driver (fuzz_driver.c) on random sequences of calls over live, released,
    copied, altered, NULL and made-up structs and handles: the process ends normally, every
    status is 0 or one of the APIs' codes, and a sequence gives the same statuses again."""
    _, compile_c = built
    exe = compile_c(Path(__file__).with_name("fuzz_driver.c"), "fuzz_driver")
    garbage = tmp_path / "garbage.hbm"
    garbage.write_bytes(bytes(range(256)) * 4)
    known = {0} | {getattr(m, n) for m in (hbsys, hbdnn) for n in dir(m)
                   if re.fullmatch(r"HB_(SYS|DNN)_[A-Z_]+", n)
                   and isinstance(getattr(m, n), int) and getattr(m, n) < 0}
    rng = np.random.default_rng(2027)
    for _ in range(3):
        ops = rng.integers(0, 16, 600)
        ops[rng.random(600) < 0.08] = 7  # loads a little more often: more live models
        lines = "".join(f"{op} {' '.join(map(str, rng.integers(0, 10**6, 4)))}\n"
                        for op in ops)
        outputs = []
        for _ in range(2):
            done = run(exe, models["float"][0], garbage, input=lines,
                       env={"HB_DNN_LOG_LEVEL": "0"})
            assert done.returncode == 0 and done.stderr == "", done.stderr
            outputs.append(done.stdout)
        assert outputs[0] == outputs[1]
        statuses = [int(line.split()[1]) for line in outputs[0].splitlines()]
        assert len(statuses) == 600 and set(statuses) <= known
        assert statuses.count(0) > 60


def test_the_samples_nv12_conversion_is_opencvs(built, tmp_path):
    """sample_image.h's PPM reading and BGR-to-NV12 conversion against OpenCV's I420 with U
    and V interleaved, on scikit-image photos and on random pixels."""
    exe = tmp_path / "nv12_of"
    subprocess.run([CC, "-O1", "-Wall", "-Werror", str(Path(__file__).with_name("nv12_of.c")),
                    "-o", str(exe)], check=True, capture_output=True, text=True)
    noise = np.random.default_rng(5).integers(0, 256, (512, 768, 3), dtype=np.uint8)
    for name, bgr in [(p, cv2.imread(str(PHOTOS / p))) for p in PICTURES] + [("noise", noise)]:
        bgr = bgr[:bgr.shape[0] // 2 * 2, :bgr.shape[1] // 2 * 2]
        picture = tmp_path / f"{Path(name).stem}.ppm"
        assert cv2.imwrite(str(picture), bgr)
        done = subprocess.run([str(exe), str(picture)], capture_output=True, check=True)
        assert done.stdout == nv12(bgr).tobytes(), name
