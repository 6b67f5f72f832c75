"""The benchmark's timer: a kernel's systems are timed in interleaved rounds."""
from benchmarks.run import Timer


def _recording(log, name):
    def call(*args):
        log.append(name)
        return name
    return call


def test_jobs_are_timed_in_interleaved_rounds_each_with_its_own_count():
    log = []
    timer = Timer(share_s=1.0, repeat=6)
    jobs = [timer.warm(_recording(log, name), tuple) for name in "abc"]
    assert log == ["a", "b", "c"]           # the warm-ups, each once
    del log[:]
    timer.interleaved(jobs, rounds=3)
    assert log == ["a", "a", "b", "b", "c", "c"] * 3
    for job, name in zip(jobs, "abc"):
        assert job.timing["repeats"] == 6 and len(job.timing["times_s"]) == 6
        assert job.timing["min_s"] <= job.timing["median_s"] and job.out == name


def test_a_count_that_does_not_divide_into_the_rounds_keeps_its_total():
    log = []
    timer = Timer(share_s=1.0, repeat=5)
    jobs = [timer.warm(_recording(log, name), tuple) for name in "ab"]
    del log[:]
    timer.interleaved(jobs, rounds=4)
    assert log.count("a") == 5 and log.count("b") == 5
    assert log[:3] == ["a", "b", "a"]       # rounds of 1, 1, 1 and 2 calls: b is timed in the first round


def test_a_call_far_over_its_share_is_sampled_by_its_warm_up_and_a_failure_is_kept_per_job():
    log = []
    timer = Timer(share_s=1e-9)
    slow = timer.warm(_recording(log, "slow"), tuple)
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) > 1:
            raise RuntimeError("second call fails")

    bad = Timer(share_s=1.0, repeat=3).warm(flaky, tuple)
    timer.interleaved([slow], rounds=2)
    assert slow.timing["from_warmup"] and slow.timing["repeats"] == 0 and log == ["slow"]
    Timer(share_s=1.0, repeat=3).interleaved([bad], rounds=3)
    assert isinstance(bad.error, RuntimeError) and bad.timing is None and len(calls) == 2
