"""What a run in a file (nohup, SLURM, CI: standard error not a terminal) says while it works: a line after each
validation with what it logged (MNIST's accuracy, as translation's BLEU has its own line), and the test at the end of
fit, a beam search of minutes on a real corpus, in progress lines as scripts/evaluate.py prints them."""

import csv
import re

from tests.helpers import fit, recipe_args

CSV = ["--trainer.logger", "CSVLogger"]


def logged_validations(root) -> list[dict[str, str]]:
    """The rows of the run's metrics.csv (Lightning's CSVLogger) that hold a validation."""
    (path,) = root.rglob("metrics.csv")
    with path.open() as f:
        return [row for row in csv.DictReader(f) if row.get("val/loss")]


def test_mnist_prints_its_validation_metrics_each_epoch(tmp_path):
    # 13 batches an epoch, 2 epochs: a line after each epoch's validation, with the values W&B or the CSV log get.
    args = [*recipe_args("mnist", tmp_path / "data"), *CSV, "--trainer.max_epochs", "2", "--test", "false"]
    result = fit(tmp_path / "run", *args, "--trainer.precision", "32-true")
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if " | validation | " in line]
    rows = logged_validations(tmp_path / "run")
    assert len(lines) == len(rows) == 2, result.stderr[-3000:]
    for epoch, (line, row) in enumerate(zip(lines, rows)):
        step = 13 * (epoch + 1)
        expected = f"val/acc {float(row['val/acc']):.4f} | val/loss {float(row['val/loss']):.4f}"
        assert line == f"epoch {epoch} step {step}/26 | validation | {expected}", line


def test_the_test_at_the_end_of_fit_prints_progress_lines(tmp_path):
    # The corpus recipe's test split, beam-decoded 4 sentences a batch: a line about every tenth of it, each in
    # scripts/evaluate.py's form, the last at the whole split, before the line with the test's BLEU.
    args = [*recipe_args("corpus", tmp_path / "data"), *CSV, "--trainer.max_epochs", "1"]
    result = fit(tmp_path / "run", *args, "--model.init_args.eval_batch_size", "4")
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stderr.splitlines()
    (scored,) = [i for i, line in enumerate(out) if ": test/bleu=" in line]
    total = int(re.search(r" on (\d+) sentences ", out[scored])[1])
    form = re.compile(rf"test: translating: ([\d,]+)/{total} sentences \| [\d.,]+ sentences/s \| elapsed \d+:\d\d:\d\d")
    progress = [(i, form.match(line)) for i, line in enumerate(out) if line.startswith("test: translating")]
    assert progress and all(match for _, match in progress), out[-40:]
    done = [int(match[1].replace(",", "")) for _, match in progress]
    assert done == sorted(done) and done[-1] == total and len(done) >= min(10, total // 4), done
    assert progress[-1][0] < scored
    assert not [line for line in out if line.startswith("val: translating")]  # validation's greedy BLEU stays one line
