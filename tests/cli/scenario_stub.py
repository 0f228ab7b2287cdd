"""A scenario registered by a test: one host thread that sleeps `ms` simulated ms."""

import emu


def run_scenario(options, preset, config_file, overrides, trace, progress):
    with emu.Session(preset, config_file, overrides, trace=trace) as sess:
        sess.spawn(emu.sleep_ms, options["ms"], name="sleeper")
    return {"slept_ms": options["ms"], "loud": options["loud"]}, sess


def summary(results):
    return "stub", ["slept ms"], [(results["slept_ms"],)], ["a note"]
