"""Put this folder first on PYTHONPATH with FEMLM_TEST_STEP_SLEEP=<seconds> and every Python process started
(the CLI, a submitit task, a torchrun worker) pads each optimizer step with that sleep, numerics untouched, so
that a test's signal lands mid-run rather than after the end."""

import os

if os.environ.get("FEMLM_TEST_STEP_SLEEP"):
    import time

    from femlm.train import core

    _step = core.PretrainCore.step

    def _slow_step(self, s):  # type: ignore[no-untyped-def]
        out = _step(self, s)
        time.sleep(float(os.environ["FEMLM_TEST_STEP_SLEEP"]))
        return out

    core.PretrainCore.step = _slow_step
