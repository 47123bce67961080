"""Run one page's samples in order: ``python _run_page.py SPEC.json`` in the page's directory.

SPEC is a list of steps ``{"kind": "file"|"python"|"sh", "where", "code", "path", "url"}``
(built by test_samples.py). Python steps share one namespace; each failure prints where its
block starts and exits 1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
from pathlib import Path


def main(spec_path: str) -> int:
    steps = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    here = Path.cwd()
    sys.path.insert(0, str(here))
    namespace: dict[str, object] = {"__name__": "__main__"}
    default_url = os.environ["JOBYARD_URL"]
    for step in steps:
        where, code = step["where"], step["code"]
        if step["kind"] == "file":
            target = here / step["path"]
            target.parent.mkdir(parents=True, exist_ok=True)
            for parent in target.relative_to(here).parents:
                if target.suffix == ".py" and parent != Path("."):
                    (here / parent / "__init__.py").touch()
            target.write_text(code, encoding="utf-8")
            continue
        if step["kind"] == "sh":
            done = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", code],
                capture_output=True,
                text=True,
                timeout=60,
            )
            sys.stdout.write(done.stdout)
            if done.returncode != 0:
                print(f"{where}: shell block exited {done.returncode}\n{done.stderr}")
                return 1
            continue
        os.environ["JOBYARD_URL"] = step.get("url") or default_url
        try:
            exec(compile(code, where, "exec"), namespace)
        except BaseException:  # noqa: BLE001 - a sample's SystemExit is a failure, named too
            print(f"{where}: python block failed")
            traceback.print_exc()
            return 1
        finally:
            os.environ["JOBYARD_URL"] = default_url
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
