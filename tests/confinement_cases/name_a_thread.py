"""Names a new thread as CUDA's driver names its own while its context is made (before the candidate confines
itself): by writing /proc/self/task/<tid>/comm, the tid as this process's PID namespace numbers it. Prints the
outcome ("ok" or the error) and the name the kernel then reports."""
import json
import threading

outcome = {}


def name_myself():
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as comm:
            comm.write("named-thread")
        with open(f"/proc/self/task/{threading.get_native_id()}/comm") as comm:
            outcome["name"] = comm.read().strip()
        outcome["written"] = "ok"
    except OSError as error:
        outcome["written"] = f"{type(error).__name__}: {error.strerror}"


thread = threading.Thread(target=name_myself)
thread.start()
thread.join()
print(json.dumps(outcome))
