"""Commands as a user types them: a script started by another Python than the project's says which to use, an
abbreviated option is refused rather than guessed, a recipe that is not YAML is named with its line, and the
commands the README and the recipes' header comments give name the venv's interpreter."""

from __future__ import annotations

import re
import sys

import pytest
import yaml

from common.environment import INSTALL
from tests.helpers import ENV, FIT, ROOT, assert_one_line_error, env_hiding, run

SCRIPTS = sorted(p.stem for p in (ROOT / "scripts").glob("*.py") if not p.name.startswith("_"))  # _checkout.py: no command


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_script_run_by_another_python_names_the_venv_in_one_line(name):
    # The system's python has neither torch nor lightning: here they are hidden from this one.
    result = run([sys.executable, f"scripts/{name}.py", "--help"], env=env_hiding("torch", "lightning"))
    assert result.returncode == 2 and not result.stdout
    assert_one_line_error(result, "torch", "lightning", f"run .venv/bin/python scripts/{name}.py --help (", INSTALL)


@pytest.mark.parametrize("name", SCRIPTS)
def test_an_abbreviated_option_is_refused_not_guessed(name):
    # `--hel` would be taken for --help (every script has it) where abbreviations are completed.
    result = run([sys.executable, f"scripts/{name}.py", "--hel"])
    assert result.returncode == 2 and "usage:" not in result.stdout, result.stdout[-2000:]
    assert "error:" in result.stderr and "Traceback" not in result.stderr, result.stderr[-3000:]


@pytest.mark.parametrize(
    "args, refused",
    [
        (["--trainer.max_epoch", "5"], "--trainer.max_epoch 5"),
        (["--seed", "1"], "--seed 1"),
        # A class's own parser refuses them too, in one line naming the option as given.
        (["--model.init_args.net.d_mode", "32"], "--model.init_args.net.d_mode: tasks.Seq2SeqTransformer has no such option"),
    ],
)
def test_fit_refuses_an_abbreviated_option_in_one_line(args, refused):
    result = run([*FIT, *args, "--print_config"])
    assert result.returncode == 2, result.stdout[-2000:]
    assert_one_line_error(result, refused)


@pytest.mark.parametrize("name", ["fit", "prepare"])
def test_a_recipe_that_is_not_yaml_is_named_with_its_line(tmp_path, name):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("trainer:\n  max_epochs: 3\n   devices: 1\n")
    result = run([sys.executable, f"scripts/{name}.py", "--config", str(recipe)])
    assert result.returncode == 2
    line = assert_one_line_error(result, f"{recipe}, line 3, column 11: not valid YAML")
    assert "<unicode string>" not in result.stderr, line


# ---------------------------------------------------------------------------------------------- commands in the docs


def header_commands(text: str) -> list[str]:
    """The commands a recipe's header comment gives: its indented comment lines."""
    return [line[1:].strip() for line in text.splitlines() if line.startswith("#   ")]


@pytest.mark.parametrize("recipe", sorted((ROOT / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_a_recipes_header_runs_its_commands_with_the_venvs_python(recipe):
    text = recipe.read_text()
    commands = header_commands(text)
    assert commands, f"{recipe.name} gives no command"
    for command in commands:
        words = command.split("#")[0].split()
        program = next(w for w in words if "=" not in w)  # after OMP_NUM_THREADS=1 and the like
        assert program == ".venv/bin/python", command
    # The files it names as the code behind it exist.
    for path in re.findall(r"\b((?:tasks|training|datamodules|models|scripts|configs)/[\w/]+\.(?:py|yaml))\b", text):
        assert (ROOT / path).is_file(), f"{recipe.name} names {path}, which does not exist"
    yaml.safe_load(text)


def test_the_readme_runs_every_script_with_the_venvs_python():
    readme = (ROOT / "README.md").read_text()
    bare = [line for line in readme.splitlines() if re.search(r"(?<![/\w])python3? (scripts|benchmarks)/", line)]
    assert not bare, bare


@pytest.mark.parametrize("inside", [["checkpoints/epoch003-step90.ckpt", "checkpoints/last.ckpt"], []])
def test_a_folder_given_as_the_checkpoint_is_named_as_a_folder(tmp_path, inside):
    for name in inside:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    result = run([sys.executable, "scripts/translate.py", "--ckpt", str(tmp_path), "Ein Hund rennt."])
    line = assert_one_line_error(result, f"{tmp_path} is a folder, not a checkpoint file")
    assert line.endswith(f"e.g. {tmp_path / 'checkpoints' / 'last.ckpt'}" if inside else "it holds no .ckpt file"), line


def test_the_readme_states_the_precision_each_corpus_recipe_names():
    readme = (ROOT / "README.md").read_text()
    paragraph = readme[readme.index("**Recipes**") :].split("\n\n")[0]
    for name, recipe in (("Multi30k", "multi30k"), ("Tatoeba", "cmn_eng")):
        named = yaml.safe_load((ROOT / "configs" / f"{recipe}.yaml").read_text())["trainer"].get("precision")
        sentence = next(s for s in re.split(r"(?<=[;.])\s", paragraph) if s.startswith(name) and "precision" in s)
        if named is None:  # chosen from the machine (training/precision.py): the README must not name one
            assert "names no precision" in sentence and "`precision:" not in sentence, sentence
        else:
            assert f"`precision: {named}`" in sentence, sentence


# ---------------------------------------------------------------------------------------------- waits and noise


def test_a_hugging_face_dataset_offline_is_one_line_at_once(tmp_path):
    # Nothing answers at the hub's address (a closed port: offline as far as the hub is concerned), nothing cached.
    env = {**ENV, "HF_ENDPOINT": "http://127.0.0.1:9", "HF_HOME": str(tmp_path / "hf-home")}
    recipe = ["--config", "configs/wmt14_en_de.yaml", "--data.data_dir", str(tmp_path / "wmt14")]
    result = run([sys.executable, "scripts/prepare.py", *recipe], env=env)
    assert_one_line_error(result, "'wmt14'", "http://127.0.0.1:9 does not answer", "not in Hugging Face's cache")
    assert "Retry" not in result.stderr and "thrown while requesting" not in result.stderr, result.stderr[-3000:]


@pytest.mark.slow
def test_a_compiled_decoder_on_a_cpu_says_nothing_of_cuda(ckpts, tmp_path):
    # A CUDA toolkit and no GPU: torch notes "No CUDA runtime is found" as the compile loads its C++ tools.
    env = {**ENV, "CUDA_HOME": str(tmp_path), "CUDA_VISIBLE_DEVICES": ""}
    args = ["--ckpt", str(ckpts["good"]), "--static-cache", "compile", "我 是 学 生"]
    result = run([sys.executable, "scripts/translate.py", *args], env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(result.stdout.splitlines()) == 1 and "CUDA" not in result.stderr, result.stderr[-3000:]
