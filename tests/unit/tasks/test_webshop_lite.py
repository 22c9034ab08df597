"""webshop-lite's generator and task: WebShop's file formats, determinism from the seed,
every public expert walkthrough at full reward, disjoint splits, the protocol's prompts, and
``agent2rl data make webshop-lite``."""

from __future__ import annotations

import json

from support.cli import run_cli

from agent2rl.files import read_jsonl
from agent2rl.tasks.webshop import protocol
from agent2rl.tasks.webshop.catalog import load_catalog
from agent2rl.tasks.webshop.engine import Shop
from agent2rl.tasks.webshop.games import ShopGames
from agent2rl.tasks.webshop.generate_lite import generate_catalog, write_catalog
from agent2rl.tasks.webshop.store import catalog_dir

SMALL = {"n_products": 60, "n_train": 20, "n_eval": 8, "n_validation": 8}


def test_catalog_has_webshops_schema_and_is_deterministic(tmp_path) -> None:
    products, attrs, human = generate_catalog(seed=5, n_products=50)
    assert (products, attrs, human) == generate_catalog(seed=5, n_products=50)
    assert generate_catalog(seed=6, n_products=50)[0] != products
    for p in products:
        assert set(p) >= {
            "asin", "name", "category", "query", "product_category", "full_description",
            "small_description", "pricing", "customization_options", "images",
        }  # fmt: skip
        assert len(p["asin"]) <= 10 and p["pricing"].startswith("$")
        assert p["product_category"].count("›") == 2
        for values in p["customization_options"].values():
            assert values and all(set(v) == {"value", "image"} for v in values)
        a = attrs[p["asin"]]
        assert set(a) == {"attributes", "instruction", "instruction_attributes"}
        assert set(a["instruction_attributes"]) <= set(a["attributes"])
    assert len({p["asin"] for p in products}) == 50
    assert len({p["category"] for p in products}) == 5
    for rows in human.values():
        assert set(rows[0]) == {
            "asin", "instruction", "attributes", "options", "instruction_attributes",
            "instruction_options", "assignment_id", "worker_id",
        }  # fmt: skip
    write_catalog(tmp_path, seed=5, n_products=50)
    assert len(load_catalog(tmp_path).products) == 50  # loads as WebShop's files do


def test_lite_task_splits_walkthroughs_and_prompts(tmp_path) -> None:
    from agent2rl.tasks import get_task, prepare_task

    task = get_task("webshop-lite", SMALL)
    prepared = prepare_task(task, tmp_path)
    splits = ("public", "private", "validation")
    goals = {s: read_jsonl(prepared.split(s) / "goals.jsonl") for s in splits}
    assert len(goals["private"]) == 8 and len(goals["validation"]) == 8
    products = {s: {g["asin"] for g in rows} for s, rows in goals.items()}
    assert not products["private"] & products["public"]
    assert not products["validation"] & (products["public"] | products["private"])
    walks = read_jsonl(prepared.public / "walkthroughs.jsonl")
    assert len(walks) == 20
    public = {g["game_id"] for g in goals["public"]}
    # every public expert walkthrough reaches the full reward when replayed in the shop
    source = ShopGames(catalog_dir(prepared), prepared.public / "goals.jsonl", max_steps=15)
    for w in walks:
        assert w["game_id"] in public and w["won"] and w["reward"] == 1.0
        ep = source.open(source.by_id[w["game_id"]])
        for s in w["steps"]:
            ep.step(s["action"])
        assert ep.last.won and ep.last.reward == 1.0
    # prompts fit: every step of every walkthrough stays within the character budget
    fmt = task.episode_format()
    for w in walks:
        pairs = [(s["observation"], s["action"]) for s in w["steps"]]
        for t in range(len(pairs)):
            p = protocol.build_prompt(w["goal"], pairs[:t], pairs[t][0], [], fmt)
            assert len(p) <= fmt.max_prompt_chars and p.endswith("\n>")
            assert "Instruction:" not in p.split("\n", 1)[1]  # the goal is shown once
        head, pieces = protocol.transcript(w["goal"], pairs, fmt)
        assert head + pieces[0][0] == protocol.build_prompt(w["goal"], [], pairs[0][0], [], fmt)
    assert task.eval_settings()["scorer"] == {"scorer": "webshop-purchase", "by": "reward"}
    assert json.dumps(fmt.to_dict())  # what data/eval_format.json holds


def test_protocol_parses_actions() -> None:
    assert protocol.parse_action(" click[B0K3X9] and more\nnext") == "click[b0k3x9]"
    assert protocol.parse_action("> Search[Red  Shoes]") == "search[red shoes]"
    assert protocol.parse_action("Action 3: choose[Buy Now]") == "click[buy now]"
    assert protocol.parse_action("\n\n") == ""
    assert protocol.parse_action("think: hmm") == "think: hmm"
    fmt = protocol.EpisodeFormat(5, 1, 300, 8, max_observation_chars=20, separator=" | ")
    page = "Instruction: [SEP] buy x [SEP] Back to Search [SEP] Page 1 (Total results: 3)"
    assert protocol.shown_page(page, fmt) == "Back to Search |..."
    fmt = protocol.EpisodeFormat(5, 1, 300, 8, show_admissible=True)
    msg = protocol.build_chat_message("buy x", [], page, ["click[next >]"], fmt)
    assert msg.endswith("Actions: click[next >]\n" + protocol.CHAT_INSTRUCTION)


def test_data_make_webshop_lite(tmp_path) -> None:
    out = tmp_path / "lite"
    r = run_cli(["data", "make", "webshop-lite", "--out", str(out), "--n", "25", "--seed", "3"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "25 products" in r.stdout
    shop = Shop(load_catalog(out))
    assert len(shop.catalog.products) == 25
    walks = read_jsonl(out / "walkthroughs.jsonl")
    assert walks and all(w["reward"] == 1.0 for w in walks)
    again = run_cli(["data", "make", "webshop-lite", "--out", str(out), "--n", "25"])
    assert again.returncode != 0 and "not empty" in again.stdout + again.stderr
