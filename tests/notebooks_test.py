# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The notebooks are committed executed, with their outputs and plots.

The suite runs every notebook with nbmake, so they cannot rot, but nbmake
does not write its outputs back: a reader browsing ``notebooks/`` (or the
docs, which render the stored outputs and never execute) sees only what was
committed. This test reads the committed JSON, executes nothing, and asks
of each notebook:

* nbformat 4.5 or later, every cell with a unique ``id`` (cells without one
  make nbformat warn, and will be an error in its future versions);
* every non-empty code cell executed, in one top-to-bottom run of a fresh
  kernel: execution counts 1, 2, 3, ... in cell order. A cell that prints
  nothing passes (it still has its count); a notebook saved before it was
  run, or run out of order, does not;
* no error among the outputs;
* at least one PNG image: each notebook plots what it measures;
* outputs that name no absolute path of this checkout or home directory;
* under `MAX_BYTES` on disk (the images are stored at a modest size and
  resolution, ``plt.rcParams["figure.dpi"] = 80``).

``python tests/notebooks_test.py --execute notebooks/NAME.ipynb ...`` runs
notebooks in place with nbclient, as a reader would (the suite's XLA flags
are not set), storing what this test asks and no timestamps: one output per
stream and cell, the notebook's metadata unchanged. ``jupyter nbconvert
--execute --inplace`` passes the test too, but records each cell's run time.
"""

import copy
import glob
import json
import os
import re
import sys

from absl.testing import absltest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")))
MAX_BYTES = 300 * 1024
CELL_ID = re.compile(r"^[a-zA-Z0-9-_]{1,64}$")  # nbformat 4.5's pattern


def _output_text(output):
    """What an output stores, as one string (base64 images left out)."""
    data = {k: v for k, v in output.get("data", {}).items() if "image" not in k}
    return json.dumps({**output, "data": data})


class NotebooksTest(absltest.TestCase):
    def test_there_are_notebooks(self):
        self.assertGreaterEqual(len(NOTEBOOKS), 8)

    def test_committed_executed_with_plots(self):
        for path in NOTEBOOKS:
            name = os.path.relpath(path, ROOT)
            with self.subTest(notebook=name):
                with open(path, encoding="utf-8") as f:
                    self.check_notebook(name, json.load(f))
                self.assertLess(os.path.getsize(path), MAX_BYTES, name)

    def check_notebook(self, name, nb):
        version = (nb["nbformat"], nb["nbformat_minor"])
        self.assertGreaterEqual(version, (4, 5), name)
        ids = [cell.get("id") for cell in nb["cells"]]
        for i, cell_id in enumerate(ids):
            self.assertIsInstance(cell_id, str, f"{name}: cell {i} has no id")
            self.assertRegex(cell_id, CELL_ID, f"{name}: cell {i}")
        self.assertLen(set(ids), len(ids), f"{name}: duplicate cell ids")

        code = [
            cell
            for cell in nb["cells"]
            if cell["cell_type"] == "code" and "".join(cell["source"]).strip()
        ]
        self.assertEqual(
            [cell["execution_count"] for cell in code],
            list(range(1, len(code) + 1)),
            f"{name}: not run top to bottom in a fresh kernel (execution "
            "counts of its code cells)",
        )
        outputs = [output for cell in code for output in cell["outputs"]]
        errors = [o for o in outputs if o["output_type"] == "error"]
        self.assertEmpty(errors, f"{name}: stored an error")
        images = [o for o in outputs if "image/png" in o.get("data", {})]
        self.assertNotEmpty(images, f"{name}: no plot among the outputs")
        # Paths an output could leak: this checkout's and the home
        # directory's (with a separator: "/root" alone is not matched).
        home = os.path.join(os.path.expanduser("~"), "")
        for output in outputs:
            text = _output_text(output)
            for private in (ROOT, home):
                if len(private) > 1:
                    self.assertNotIn(private, text, f"{name}: an output")


def execute_in_place(path):
    """Runs a notebook top to bottom in a fresh kernel and stores it."""
    import nbclient
    import nbformat
    from nbformat.validator import normalize

    folder = os.path.dirname(os.path.abspath(path))  # the kernel's cwd
    nb = nbformat.read(path, as_version=4)
    metadata = copy.deepcopy(nb.metadata)
    nb = nbformat.from_dict(normalize(nb)[1])  # adds missing cell ids
    nbclient.NotebookClient(
        nb,
        timeout=900,
        kernel_name="python3",
        record_timing=False,
        resources={"metadata": {"path": folder}},
    ).execute()
    for cell in nb.cells:
        merged = []
        for o in cell.get("outputs", []):
            last = merged[-1] if merged else None
            if (
                o.output_type == "stream"
                and last is not None
                and last.output_type == "stream"
                and last.name == o.name
            ):
                last.text += o.text
            else:
                merged.append(o)
        if cell.cell_type == "code":
            cell.outputs = merged
    nb.metadata = metadata  # no kernel or Python versions
    nbformat.validate(nb)
    with open(path, "w", encoding="utf-8") as f:
        f.write(nbformat.writes(nb) + "\n")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--execute"]:
        for notebook in sys.argv[2:]:
            execute_in_place(notebook)
            print(notebook, os.path.getsize(notebook), "bytes")
    else:
        absltest.main()
