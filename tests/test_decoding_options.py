"""`inference.options.DecodingOptions`: every option checked once, in one line; the scripts' flags made from its
fields with fairseq's names; a plain dict in checkpoints and exports; a bad flag named as the user typed it."""

from __future__ import annotations

import argparse
import dataclasses
import io

import pytest
import torch

from common.errors import InputError
from inference.flags import SEARCH, TOOLS, add_decoding_arguments, add_search_arguments, decoding_options, flag_of
from inference.options import CHECKPOINT_DEFAULTS, DecodingOptions

# The flags of translate.py and evaluate.py before the options were one object: their names must not change.
FLAGS = {
    "beam_size": "--beam-size",
    "nbest": "--nbest",
    "length_penalty": "--length-penalty",
    "max_len": "--max-len",
    "min_len": "--min-len",
    "no_repeat_ngram_size": "--no-repeat-ngram-size",
    "ban_unk": "--ban-unk",
    "sampling": "--sampling",
    "temperature": "--temperature",
    "top_k": "--sampling-topk",
    "top_p": "--sampling-topp",
    "seed": "--seed",
    "alignment_layer": "--alignment-layer",
    "static_cache": "--static-cache",
    "tgt_lang": "--tgt-lang",  # a multilingual model's target language (datamodules/languages.py)
}


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(beam_size=0), "beam_size=0 must be at least 1"),
        (dict(nbest=3, beam_size=2), "nbest=3 is larger than beam_size=2"),
        (dict(length_penalty=-0.5), "length_penalty=-0.5 must be at least 0 and finite"),
        (dict(length_penalty=float("nan")), "length_penalty=nan"),
        (dict(sampling=True, top_p=0.0), "top_p=0.0 must be in (0, 1]"),
        (dict(sampling=True, top_p=1.5), "top_p=1.5 must be in (0, 1]"),
        (dict(sampling=True, temperature=0.0), "temperature=0.0 must be above 0 and finite"),
        (dict(sampling=True, temperature=float("inf")), "temperature=inf"),
        (dict(top_k=5), "apply to sampling only"),
        (dict(min_len=-1), "min_len=-1 must be at least 0"),
        (dict(alignment_layer=1.5), "alignment_layer=1.5 must be an integer"),
        (dict(static_cache="graph"), "static_cache='graph' must be one of"),
        (dict(static_cache="eager", use_cache=False), "use_cache=False"),
        (dict(static_cache="eager", sampling=True), "not with sampling"),
    ],
)
def test_every_bad_option_is_one_input_error_line(changes, message):
    with pytest.raises(InputError) as err:
        DecodingOptions(**changes)
    assert message in str(err.value) and str(err.value).startswith("DecodingOptions: ") and "\n" not in str(err.value)
    with pytest.raises(InputError):
        DecodingOptions().replace(**changes)  # replace checks again


def test_sampling_alone_may_exceed_the_beam_and_an_unknown_option_is_named():
    assert DecodingOptions(sampling=True, nbest=5).nbest == 5
    with pytest.raises(InputError, match="no decoding option beam"):
        DecodingOptions().replace(beam=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        DecodingOptions().beam_size = 2


def test_ranking_alpha_is_the_penalty_of_beam_search_only():
    assert DecodingOptions(beam_size=4, length_penalty=0.6).ranking_alpha == 0.6
    assert DecodingOptions(beam_size=1, length_penalty=0.6).ranking_alpha == 0.0
    assert DecodingOptions(beam_size=4, length_penalty=0.6, sampling=True).ranking_alpha == 0.0


def test_options_are_a_plain_dict_that_round_trips_through_a_checkpoint_file(tmp_path):
    options = DecodingOptions(beam_size=3, length_penalty=0.2, max_len_a=2.0, max_len_b=4, min_len=1)
    torch.save({"decoding": options.as_dict()}, tmp_path / "o.pt")
    loaded = torch.load(tmp_path / "o.pt", weights_only=True)["decoding"]
    assert DecodingOptions(**loaded) == options
    # A checkpoint's hyperparameters: only the model's decoding defaults are read; the network's max_len is not ours.
    hparams = {"length_penalty": 0.2, "max_len_a": 2.0, "max_len_b": 4, "max_len": 256, "d_model": 16}
    assert DecodingOptions.from_mapping(hparams) == DecodingOptions(length_penalty=0.2, max_len_a=2.0, max_len_b=4)
    assert DecodingOptions.from_mapping({}) == DecodingOptions()  # a checkpoint older than every option
    assert set(CHECKPOINT_DEFAULTS) <= set(options.as_dict())


def test_the_flags_are_made_from_the_fields_with_their_old_names():
    parser = argparse.ArgumentParser()
    add_search_arguments(parser, "nbest", "alignment_layer", "static_cache")
    made = {a.dest: a.option_strings[0] for a in parser._actions if a.dest in DecodingOptions.__dataclass_fields__}
    assert made == FLAGS
    assert {name: flag_of(name) for name in FLAGS} == FLAGS
    help_text = io.StringIO()
    parser.print_help(help_text)
    text = " ".join(help_text.getvalue().split())  # argparse wraps lines
    assert "beam width; 1 = greedy (default: 4)" in text and "beam search (default: the model's)" in text
    args = parser.parse_args(["--sampling", "--sampling-topk", "5", "--sampling-topp", "0.9", "--min-len", "2"])
    defaults = DecodingOptions(length_penalty=0.3)  # a model's
    options = decoding_options(args, defaults)
    assert (options.sampling, options.top_k, options.top_p, options.min_len, options.beam_size) == (True, 5, 0.9, 2, 4)
    assert options.length_penalty == 0.3  # not given: the model's


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--sampling-topp", "1.5", "--sampling"], "--sampling-topp 1.5 must be in (0, 1]"),
        (["--sampling-topk", "3"], "--sampling-topk, --sampling-topp and --seed apply to --sampling only"),
        (["--beam-size", "0"], "--beam-size 0 must be at least 1"),
        (["--length-penalty", "-1"], "--length-penalty -1.0 must be at least 0"),
    ],
)
def test_a_bad_flag_is_named_as_the_user_typed_it(argv, message):
    parser = argparse.ArgumentParser()
    add_decoding_arguments(parser, SEARCH + TOOLS, beam_size=4)
    with pytest.raises(InputError) as err:
        decoding_options(parser.parse_args(argv))
    assert message in str(err.value) and not str(err.value).startswith("DecodingOptions")
