"""In a parameter-server job a lost worker does not end the job: the chief re-schedules its work."""

from distrib.launch import launch

SCRIPT = '''
import json, os, sys, time
task = json.loads(os.environ["TF_CONFIG"])["task"]
marker = os.path.join(sys.argv[1], "worker1-gone")
if task["type"] == "worker" and task["index"] == 1:
    open(marker, "w").close()
    sys.exit(3)
if task["type"] == "ps":
    while True:
        time.sleep(1)      # poll: a server idles until the launcher stops it
if task["type"] == "chief":
    deadline = time.monotonic() + 60
    while not os.path.exists(marker) and time.monotonic() < deadline:
        time.sleep(0.05)   # poll: the chief goes on only after the worker is gone
    print("chief done", flush=True)
'''


def test_worker_failure_in_a_ps_job_is_reported_and_tolerated(write_script, tmp_path):
    script = write_script("ps_job.py", SCRIPT)
    result = launch(str(script), [str(tmp_path)], workers=2, chief=True, ps=1, output="capture",
                    timeout=120)
    assert result.returncode == 0, result.output
    assert "worker 1 failed with exit code 3; the chief re-schedules its work" in result.output
    assert "chief done" in result.outputs["chief"]


def test_worker_failure_without_ps_still_ends_the_job(write_script, tmp_path):
    script = write_script("ps_job.py", SCRIPT.replace('"ps"', '"none"'))
    result = launch(str(script), [str(tmp_path)], workers=2, chief=True, output="capture", timeout=120)
    assert result.returncode != 0
    assert "worker 1 failed with exit code 3" in result.output
