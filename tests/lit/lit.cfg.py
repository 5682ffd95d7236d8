# lit configuration for kjit's codegen tests: tests/lit/**/*.test, each with
# RUN lines over `kjit emit` / `kjit compile --ptx` and FileCheck patterns.
import os
import lit.formats

config.name = "kjit"
# The internal shell: portable, and provides `not`, `env` and `diff`.
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".test"]
config.test_source_root = os.path.dirname(__file__)
config.substitutions.append(("%kjit", config.kjit))
config.substitutions.append(("FileCheck", config.filecheck))
# Generated code must not depend on the caller's environment.
config.environment.pop("KJIT_DUMP", None)
config.environment["KJIT_CACHE"] = "off"

# tools/lessons/plot.py's tests need matplotlib.
import subprocess
if subprocess.run(["python3", "-c", "import matplotlib"], capture_output=True).returncode == 0:
    config.available_features.add("matplotlib")
config.substitutions.append(("%plot", "python3 " + os.path.join(
    os.path.dirname(__file__), "..", "..", "tools", "lessons", "plot.py")))
config.substitutions.append(("%run_all", "bash " + os.path.join(
    os.path.dirname(__file__), "..", "..", "tools", "lessons", "run_all.sh")))
