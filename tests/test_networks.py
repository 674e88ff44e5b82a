"""Network presets: every shipped file loads, counts match published figures, the loader is strict."""

from __future__ import annotations

from pathlib import Path

import pytest

from memwall.errors import InputError
from memwall.networks import all_networks, load_network, network_ids

IDS = ["nettalk", "family-trees", "encoder-8-3-8", "sonar", "alvinn", "lecun-1989", "affine-48x1024", "gpt2-small",
       "gpt2-xl", "bert-base", "bert-large", "gpt3-175b", "llama3-8b", "llama3-70b", "llama3-405b", "deepseek-v3", "resnet-50", "llama2-7b"]


def test_the_issue_ids_all_ship():
    assert sorted(network_ids()) == sorted(IDS)
    for net in all_networks():
        assert net.source and net.name and net.status


@pytest.mark.parametrize(
    ("nid", "parameters"),
    [
        ("nettalk", 18_320 + 106),  # one bias per non-input unit (the bias convention in the file)
        ("encoder-8-3-8", 59),
        ("sonar", 758),
        ("alvinn", 3_994),
        ("lecun-1989", 9_760),  # LeCun et al. 1989: 9,760 free parameters
        ("affine-48x1024", 50_331_648),
        ("gpt2-small", 124_439_808),  # the released checkpoint
        ("gpt2-xl", 1_557_611_200),
        ("bert-base", 109_482_240),  # BertModel with vocab 30,522
        ("bert-large", 335_141_888),  # BertModel with vocab 30,522
        ("llama3-8b", 8_030_261_248),
        ("llama2-7b", 6_738_415_616),  # meta-llama/Llama-2-7b-hf
        ("llama3-70b", 70_553_706_496),
        ("llama3-405b", 405_853_388_800),
        ("resnet-50", 25_557_032),  # torchvision
    ],
)
def test_parameter_counts_match_published_figures(nid, parameters):
    assert load_network(nid).parameters == parameters


def test_lecun_connections_are_local_and_shared_weights_counted_once():
    net = load_network("lecun-1989")
    assert net.connections == 64_660
    h1, h2 = net.conv_layers[:2]
    assert (h1.connections, h1.weight_values + h1.bias_values) == (19_968, 1_068)
    assert (h2.connections, h2.weight_values + h2.bias_values) == (38_592, 2_592)


def test_gpt3_and_deepseek_sizes():
    assert abs(load_network("gpt3-175b").parameters / 175e9 - 1) < 0.01
    ds = load_network("deepseek-v3")
    # 671B total (the checkpoint's 671,026,419,200 also counts 58 x 256 routing-bias buffers), ~37B active
    assert ds.parameters == 671_026_419_200 - 58 * 256
    assert 37.0e9 < ds.active_parameters < 38.0e9
    assert ds.kind == "moe-transformer" and ds.moe.routed_experts == 256


def test_resnet50_multiply_adds_match_torchvision():
    assert abs(load_network("resnet-50").connections / 4.09e9 - 1) < 0.005


def _write(tmp_path, text):
    p = tmp_path / "net.toml"
    p.write_text(text)
    return p


GOOD = (Path(__file__).parent / "data" / "networks" / "tiny_mlp.toml").read_text()


def test_a_file_by_path_loads(tmp_path):
    assert load_network(_write(tmp_path, GOOD)).parameters == 4 * 3 + 3 * 2 + 5


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (GOOD + "colour = 1\n", "mlp.colour"),
        ("colour = 1\n" + GOOD, "colour"),
        (GOOD.replace('activation = "sigmoid"', 'activation = "softplus"'), "mlp.activation"),
        (GOOD.replace("layers = [4, 3, 2]", 'layers = [4, "3"]'), "mlp.layers"),
        (GOOD.replace("year = 1986", 'year = "1986"'), "year"),
        (GOOD.replace('kind = "mlp"', 'kind = "rnn"'), "kind"),
        (GOOD.replace("bias = true", "bias = true\nwidth = 3"), "mlp.width"),
        (GOOD.replace('id = "tiny"', 'id = "Tiny_Net"'), "id"),
    ],
)
def test_the_loader_is_strict_and_names_file_and_field(tmp_path, change, field):
    path = _write(tmp_path, change)
    with pytest.raises(InputError) as err:
        load_network(path)
    assert err.value.field == field
    assert err.value.file == str(path)


def test_unknown_id_lists_the_known_ones():
    with pytest.raises(InputError, match="nettalk"):
        load_network("no-such-net")
