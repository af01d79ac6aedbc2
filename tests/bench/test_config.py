"""BenchConfig and Variant: every field declared once (blocklab.settings), checked from that declaration when
built, and `blocklab bench --help` and its defaults taken from it."""

import argparse
import dataclasses

import pytest

from blocklab.bench.config import BenchConfig, Shape, Variant
from blocklab.cli import bench as cli
from blocklab.errors import ConfigError, UserError
from blocklab.settings import KEY

ONE = [Variant("pre-ln")]


def parse(*argv):
    parser = argparse.ArgumentParser(prog="blocklab")
    cli.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["bench", *argv])


@pytest.mark.parametrize("cls", [BenchConfig, Variant])
def test_every_field_is_a_setting_with_a_one_line_help(cls):
    for f in dataclasses.fields(cls):
        assert KEY in f.metadata, f.name
        assert f.metadata[KEY].help.strip() and "\n" not in f.metadata[KEY].help


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(reps=0), "--reps 0 is not valid; it must be a positive integer"),
        (dict(steps=0), "--steps 0 is not valid; it must be a positive integer"),
        (dict(warmup=-1), "--warmup -1 is not valid; it must be an integer >= 0"),
        (dict(peak_size=8), "--peak-size 8 is not valid; it must be an integer >= 16"),
        (dict(adamw="sgd"), "--adamw 'sgd' is not valid; choose one of: fused, foreach, loop"),
        (dict(scaling_precision="fp8"), "--precision 'fp8' is not valid; choose one of: fp32, bf16, fp16"),
        (dict(scaling_impls=["sdpa", "flash"]), "--scaling-impls 'sdpa,flash' is not valid"),
        (dict(scaling_impls=[]), "--scaling-impls '' is not valid; it must be a non-empty list"),
        (dict(scaling_T=[512, 0]), "--memory-scaling '512,0' is not valid; it must be a list of distinct positive"),
        (dict(device="auto"), "bench.device='auto' is not valid; choose one of: cpu, cuda"),
        (dict(memory="yes"), "bench.memory='yes' is not valid"),
        (dict(shape="tiny"), "--shape 'tiny' is not valid; it must be a Shape"),
    ],
)
def test_bad_settings_are_one_line_naming_the_option(kw, message):
    with pytest.raises(ConfigError) as e:
        BenchConfig(variants=ONE, **kw)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(precision="fp8"), "--precision 'fp8' is not valid; choose one of: fp32, bf16, fp16"),
        (dict(attn_impl="flash"), "--attn-impl 'flash' is not valid; choose one of: sdpa, fused, materialized, auto"),
        (dict(compile="yes"), "--compile 'yes' is not valid"),
    ],
)
def test_bad_variants_are_one_line_naming_the_option(kw, message):
    with pytest.raises(ConfigError) as e:
        Variant("pre-ln", **kw)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_options_not_given_take_the_declared_defaults():
    cfg = cli.config_from_args(parse("--blocks", "pre-ln,sas-p", "--device", "cpu"), [])
    default = BenchConfig(variants=cfg.variants, device="cpu", command=cfg.command)
    assert cfg == default and cfg.shape == Shape() and cfg.scaling_impls == ["sdpa", "materialized"]
    assert [v.label for v in cfg.variants] == ["pre-ln fp32 eager", "sas-p fp32 eager"]
    cfg = cli.config_from_args(parse("--blocks", "sas-p", "--device", "cpu", "--precision", "bf16", "--vs-fp32-eager"))
    assert [v.label for v in cfg.variants] == ["sas-p bf16 eager", "sas-p fp32 eager"]
    assert cfg.scaling_precision == "bf16"


def test_muon_variants_and_their_adamw_baselines():
    cfg = cli.config_from_args(
        parse("--blocks", "pre-ln,sas-p", "--device", "cpu", "--optimizer", "muon", "--vs-adamw")
    )
    labels = [v.label for v in cfg.variants]
    assert labels == ["pre-ln fp32 eager muon", "sas-p fp32 eager muon", "pre-ln fp32 eager", "sas-p fp32 eager"]
    cfg = cli.config_from_args(parse("--blocks", "sas-p", "--device", "cpu", "--extra", "sas-p:muon:materialized"))
    assert cfg.variants[1] == Variant("sas-p", attn_impl="materialized", optimizer="muon")
    with pytest.raises(UserError, match="--vs-adamw times Muon against AdamW: give --optimizer muon"):
        cli.config_from_args(parse("--blocks", "sas-p", "--device", "cpu", "--vs-adamw"))
    with pytest.raises(ConfigError, match=r"^--optimizer 'sgd' is not valid; choose one of: adamw, muon"):
        Variant("pre-ln", optimizer="sgd")


def test_help_comes_from_the_declarations(capsys):
    with pytest.raises(SystemExit):
        parse("--help")
    text = " ".join(capsys.readouterr().out.split())
    fields = {f.name: f.metadata[KEY] for f in dataclasses.fields(BenchConfig)}
    for name, default in (("reps", "5"), ("warmup", "2"), ("peak_size", "2048 on CPU, 8192 on CUDA")):
        assert f"{fields[name].option} N {fields[name].help} (default: {default})" in text
    assert "--adamw {fused,foreach,loop}" in text and "(default: sdpa,materialized)" in text
    assert "--attn-impl {sdpa,fused,materialized,auto}" in text and "(default: --blocks)" in text
    assert "--scaling-only run only the memory scaling (no step timing, no peak) --reference" in text
