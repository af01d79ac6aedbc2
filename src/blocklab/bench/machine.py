"""The machine a benchmark ran on, device synchronisation, and process memory readings."""

from __future__ import annotations

import os
import platform
import resource
import sys

import torch


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def run_machine(device: torch.device) -> dict:
    """Where a run trained, kept in its summary.json: a report drawn later, on another machine, names this one."""
    out = {
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "python": platform.python_version(),
    }
    if device.type == "cuda":
        out["gpu"] = torch.cuda.get_device_name(device)
    return out


def machine_info(device: str) -> dict:
    info = {
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "device": device,
        "memory_total_bytes": meminfo("MemTotal"),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=props.name, gpu_memory_bytes=props.total_memory, cuda=torch.version.cuda)
    return info


def describe(info: dict) -> str:
    text = f"{info['cpu']} ({info['cpu_affinity'] or info['cpu_count']} cores usable, {info['torch_threads']} torch threads), torch {info['torch']}"
    if info.get("gpu"):
        text = f"{info['gpu']} (CUDA {info['cuda']}); host {text}"
    return text


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _proc_kb(path: str, key: str) -> int | None:
    """A `key: N kB` field of a /proc file in bytes, or None off Linux."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def meminfo(key: str) -> int | None:
    """A /proc/meminfo field in bytes (MemTotal, MemAvailable), or None off Linux."""
    return _proc_kb("/proc/meminfo", key)


def available_memory(device: str) -> int | None:
    """Bytes a new measurement may use: free GPU memory on CUDA, MemAvailable on CPU."""
    if device == "cuda":
        return torch.cuda.mem_get_info()[0]
    return meminfo("MemAvailable")


def _status_kb(key: str) -> int | None:
    return _proc_kb("/proc/self/status", key)


def current_rss() -> int:
    """Resident set size now (bytes)."""
    rss = _status_kb("VmRSS")
    if rss is not None:
        return rss
    return peak_rss()  # no /proc: the high-water mark is the best upper bound we have


def peak_rss() -> int:
    """High-water resident set size (bytes): VmHWM (resettable) or ru_maxrss."""
    hwm = _status_kb("VmHWM")
    if hwm is not None:
        return hwm
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def release_freed_memory() -> None:
    """Hand freed heap pages back to the OS (glibc malloc_trim), so they do not pad the next peak."""
    import gc

    gc.collect()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0, `echo 5 > /proc/self/clear_refs`). False if unsupported."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False
