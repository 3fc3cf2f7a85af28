"""A math scoring worker: reads requests on stdin, answers on stdout (see worker_process.py).

Started by `MathVerifier` as `python -m training.verifiers.math_worker`. It loads math-verify and
pint before saying hello, so the first scored answer is not charged their import time.
"""

import os
import sys


def main() -> None:
    from training.verifiers.math_verifier import MathScorerConfig, score_math_answer
    from training.verifiers.worker_process import FrameReader, encode_frame

    score_math_answer("The answer is $\\boxed{1}$ m.", "1", "m")
    output = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    # Anything a library prints must not corrupt the frames on stdout.
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    output.write(encode_frame({"ready": True}))
    output.flush()
    reader = FrameReader(sys.stdin.fileno())
    while True:
        try:
            request = reader.read(deadline=None)
        except Exception:  # stdin closed: the verifier is done with this worker
            return
        try:
            reply = score_math_answer(
                request["completion"], request["answer"], request.get("unit"),
                MathScorerConfig(**request["config"]),
            )
        except Exception as exc:  # a bug or an input that breaks a library: the verifier failed
            reply = {"worker_error": f"math scoring raised {type(exc).__name__}: {str(exc)[:200]}"}
        output.write(encode_frame(reply))
        output.flush()


if __name__ == "__main__":
    main()
