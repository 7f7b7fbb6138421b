"""The Ray backend's pure rules (backends/ray.py): which Ray errors are worth one more run of a
job, how RAY_ADDRESS and KERNLOOP_RAY_RESOURCES are read, how a node without the judge's
packages is recognised. No cluster here (tests/test_ray_backend.py runs one)."""
import socket

import pytest

from kernloop.backends.local import BackendError
from kernloop.backends.ray import (cluster_summary, missing_package, node_label, parse_resources, retried,
                          split_address, unreachable)


def test_addresses_are_host_and_port_or_left_to_ray():
    assert split_address("10.1.2.3:6379") == ("10.1.2.3", 6379)
    assert split_address("ray://head.example:10001") == ("head.example", 10001)
    assert split_address("auto") is None and split_address("local") is None
    for bad in ("head-without-port", "ray://", ":6379"):
        with pytest.raises(BackendError, match="expected host:port"):
            split_address(bad)


def test_a_closed_port_is_unreachable_an_open_one_is_not():
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        port = srv.getsockname()[1]
        assert unreachable(f"127.0.0.1:{port}") is None
    why = unreachable(f"127.0.0.1:{port}")   # closed now
    assert why is not None and f"127.0.0.1:{port}" in why and "refused" in why.lower()
    assert "cannot resolve" in unreachable("no-such-host.invalid:6379", timeout_s=2)


def test_resources_are_a_json_object_of_positive_amounts():
    assert parse_resources(None) == {} and parse_resources("") == {}
    assert parse_resources('{"accelerator_type:H200": 0.001, "big": 2}') == {
        "accelerator_type:H200": 0.001, "big": 2}
    for bad in ("[1]", '{"a": 0}', '{"a": "1"}', '{"a": true}', "{oops"):
        with pytest.raises(BackendError, match="KERNLOOP_RAY_RESOURCES"):
            parse_resources(bad)


def test_a_node_without_torch_is_recognised_from_the_judge_traceback():
    tb = ("Traceback (most recent call last):\n  File \"check.py\", line 9, in <module>\n"
          "ModuleNotFoundError: No module named 'torch'\n")
    assert missing_package(tb) == "ModuleNotFoundError: No module named 'torch'"
    assert missing_package("ModuleNotFoundError: No module named 'numpy.linalg'") is not None
    assert missing_package("ImportError: cannot import name 'x' from 'triton.language' (/x.py)")
    # what a candidate imports is the candidate's business, not the node's
    assert missing_package("ModuleNotFoundError: No module named 'flash_attn'") is None
    assert missing_package("RuntimeError: CUDA error: out of memory\n") is None
    assert missing_package("") is None


def test_cluster_summary_counts_alive_nodes_only():
    nodes = [{"Alive": True, "Resources": {"CPU": 16.0, "GPU": 1.0}},
             {"Alive": True, "Resources": {"CPU": 2.0}},
             {"Alive": False, "Resources": {"CPU": 64.0, "GPU": 8.0}}]
    assert cluster_summary(nodes) == {"nodes": 2, "gpus": 1, "cpus": 18}


def test_node_label_is_host_and_node_id_prefix():
    assert node_label({"host": "gpu-7", "node_id": "a1b2c3d4e5f6"}) == "gpu-7/a1b2c3d4"
    assert node_label({"ip": "10.0.0.9", "node_id": None}) == "10.0.0.9/?"


def test_only_a_lost_worker_node_or_answer_is_run_again():
    E = pytest.importorskip("ray.exceptions")
    again = [E.WorkerCrashedError(), E.NodeDiedError("node died"), E.LocalRayletDiedError(),
             E.OutOfMemoryError("oom"), E.ObjectLostError("ab" * 14, None, ""),
             E.OwnerDiedError("ab" * 14, None, "")]
    never = [E.TaskCancelledError(), E.RuntimeEnvSetupError("pip failed"),
             E.TaskUnschedulableError("no node"), E.GetTimeoutError(), RuntimeError("bug"),
             ValueError("bad")]
    assert all(retried(e) for e in again)
    assert not any(retried(e) for e in never)
