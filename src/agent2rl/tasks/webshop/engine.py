"""The shop: WebShop's pages and actions over a :class:`~agent2rl.tasks.webshop.catalog.Catalog`,
written anew (WebShop's own engine needs pyserini, a JDK and Flask templates).

Pages and actions follow WebShop's text environment (``web_agent_text_env.py`` in ``text``
mode, whose observation is the page's visible text joined by ``" [SEP] "``):

``search``
    ``WebShop [SEP] Instruction: [SEP] <goal> [SEP] Search``; the only page with the search
    bar: ``search[<query>]`` shows the results.
``results``
    ``Instruction: [SEP] <goal> [SEP] Back to Search [SEP] Page 1 (Total results: 50)
    [SEP] Next > [SEP] <asin> [SEP] <title> [SEP] <price> ...``: the top 50 of a BM25 search
    (:mod:`~agent2rl.tasks.shared.bm25`), 10 a page; ``< Prev`` from page 2 on; ``Next >``
    always (as in WebShop, past the last result it shows an empty page). ``click[<asin>]``
    opens a product.
``item``
    ``... Back to Search [SEP] < Prev [SEP] <option name> [SEP] <value> ... [SEP] <title>
    [SEP] Price: <price> [SEP] Rating: N.A. [SEP] Description [SEP] Features [SEP] Reviews
    [SEP] Buy Now``: ``click[<value>]`` chooses an option (one per option name, the last click
    wins), ``click[description]`` / ``features`` / ``reviews`` open a sub-page, ``click[< prev]``
    goes back to the results, ``click[buy now]`` buys: the episode ends with the purchase
    reward (:func:`~agent2rl.tasks.webshop.reward.purchase_reward`).
``description`` / ``features`` / ``reviews``
    the text, ``< Prev`` back to the item.

``click[back to search]`` works everywhere but the search page and forgets the search. Click
targets are matched in lowercase (WebShop lowercases the argument); a search query is
lowercased and split at spaces as WebShop's browser does.

Where WebShop plays an action that is not available as a no-op, this shop refuses it with
:class:`ValueError` and stays as it was (the rollout service answers 400; the grader counts
the turn): an unknown action, a search where there is no search bar, an empty search, a
click on something not on the page (an unknown product id included) or on ``search``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from agent2rl.tasks.shared.bm25 import BM25Index
from agent2rl.tasks.webshop.catalog import Catalog, Product
from agent2rl.tasks.webshop.reward import purchase_reward

#: WebShop's search depth and page size (``engine.py``)
SEARCH_RETURN_N = 50
PRODUCT_WINDOW = 10
SEP = " [SEP] "

BACK_TO_SEARCH = "back to search"
NEXT_PAGE = "next >"
PREV_PAGE = "< prev"
BUY_NOW = "buy now"
SUB_PAGES = ("description", "features", "reviews")
_ACTION = re.compile(r"^(search|click)\[(.*)\]$", re.S)


def search_text(product: Product) -> str:
    """The text WebShop indexes for a product (``convert_product_file_format.py``): title,
    description, first bullet point and ``"name: v1, v2, and name2: ..."`` of its options,
    lowercased."""
    options = ", and ".join(
        f"{name}: {', '.join(values)}" for name, values in product.options.items()
    )
    first_bullet = product.bullet_points[0] if product.bullet_points else ""
    return " ".join([product.title, product.description, first_bullet, options]).lower()


@dataclass
class Shop:
    """A catalog with its search index and each product's sale price (shared by every
    episode: build it once per process)."""

    catalog: Catalog
    #: BM25 over the products' :func:`search_text`
    index: BM25Index = field(init=False)

    def __post_init__(self) -> None:
        self.index = BM25Index([search_text(p) for p in self.catalog.products])

    def search(self, query: str) -> list[str]:
        """Up to :data:`SEARCH_RETURN_N` asins scoring above 0, best first, ties in catalog
        order."""
        products = self.catalog.products
        return [products[i].asin for i in self.index.rank(query, SEARCH_RETURN_N)]


@dataclass
class Outcome:
    """What one action did: its ``kind`` (``search``, ``click``, ``purchase``), the reward
    (non-zero only on a purchase) and whether the episode ended."""

    kind: str
    reward: float = 0.0
    done: bool = False


class ShopSession:
    """One shopper's browser over a :class:`Shop` for one goal (WebShop's session state).

    ``goal`` is a goal dictionary of :mod:`~agent2rl.tasks.webshop.catalog`. Not
    thread-safe. After a purchase, ``reward`` and ``reward_info`` hold the outcome and every
    action raises :class:`RuntimeError`.
    """

    def __init__(self, shop: Shop, goal: dict[str, Any]) -> None:
        self.shop = shop
        self.goal = goal
        self.page = "search"
        self.keywords: list[str] = []
        self.results: list[str] = []
        self.page_no = 1
        self.asin: str | None = None
        self.options: dict[str, str] = {}
        self.done = False
        self.reward = 0.0
        self.reward_info: dict[str, Any] = {}
        self.purchased: str | None = None

    # -- what the page shows ---------------------------------------------------------------
    def clickables(self) -> list[str]:
        """The click targets on the current page, lowercased, in page order."""
        if self.page == "search":
            return ["search"]
        if self.page == "results":
            prev = [PREV_PAGE] if self.page_no > 1 else []
            return [BACK_TO_SEARCH, *prev, NEXT_PAGE, *(a.lower() for a in self._shown())]
        if self.page == "item":
            values = [v for vs in self._product().options.values() for v in vs]
            return [BACK_TO_SEARCH, PREV_PAGE, *values, *SUB_PAGES, BUY_NOW]
        if self.page in SUB_PAGES:
            return [BACK_TO_SEARCH, PREV_PAGE]
        return []

    def has_search_bar(self) -> bool:
        return self.page == "search"

    def available_actions(self) -> list[str]:
        """The actions of this page as the prompt may list them: ``search[<query>]`` where
        there is a search bar, then ``click[<target>]`` for each click target (the search
        button left out: it is the search bar's)."""
        if self.done:
            return []
        out = ["search[<query>]"] if self.has_search_bar() else []
        return out + [f"click[{c}]" for c in self.clickables() if c != "search"]

    def observation(self) -> str:
        """The page's text as WebShop's ``text`` observation mode shows it."""
        instruction = ["Instruction:", self.goal["instruction_text"]]
        if self.done:
            return SEP.join(
                ["Thank you for shopping with us!", "Your score (min 0.0, max 1.0)",
                 f"{self.reward}"]
            )  # fmt: skip
        if self.page == "search":
            return SEP.join(["WebShop", *instruction, "Search"])
        head = [*instruction, "Back to Search"]
        if self.page == "results":
            nav = (["< Prev"] if self.page_no > 1 else []) + ["Next >"]
            rows: list[str] = []
            for asin in self._shown():
                prod = self.shop.catalog.by_asin[asin]
                rows += [asin, prod.title, prod.price_tag]
            total = f"Page {self.page_no} (Total results: {len(self.results)})"
            return SEP.join([*head, total, *nav, *rows])
        prod = self._product()
        if self.page == "item":
            opts: list[str] = []
            for name, values in prod.options.items():
                opts += [name, *values]
            tail = ["Description", "Features", "Reviews", "Buy Now"]
            body = [prod.title, f"Price: {prod.price_tag}", "Rating: N.A."]
            return SEP.join([*head, "< Prev", *opts, *body, *tail])
        if self.page == "description":
            return SEP.join([*head, "< Prev", prod.description])
        if self.page == "features":
            return SEP.join([*head, "< Prev", *prod.bullet_points])
        return SEP.join([*head, "< Prev"])  # reviews: the catalog has none

    def _shown(self) -> list[str]:
        start = (self.page_no - 1) * PRODUCT_WINDOW
        return self.results[start : start + PRODUCT_WINDOW]

    def _product(self) -> Product:
        assert self.asin is not None
        return self.shop.catalog.by_asin[self.asin]

    # -- acting ----------------------------------------------------------------------------
    def act(self, action: str) -> Outcome:
        """Play ``action`` (``search[...]`` or ``click[...]``). Raises :class:`ValueError`
        naming the problem for one this page does not offer (nothing changes), and
        :class:`RuntimeError` after the purchase."""
        if self.done:
            raise RuntimeError("the episode is over: the product was bought")
        m = _ACTION.match(action.strip())
        if m is None:
            raise ValueError(
                f"unknown action {action[:60]!r}: use search[your query] on the search page "
                "or click[a button, product id or option shown on the page]"
            )
        name, arg = m.group(1), m.group(2).strip().lower()
        return self._search(arg) if name == "search" else self._click(arg)

    def _search(self, query: str) -> Outcome:
        if not self.has_search_bar():
            raise ValueError("there is no search bar on this page: click[back to search] first")
        if not query:
            raise ValueError("the search query is empty: search[what you are looking for]")
        # WebShop's browser splits the query at spaces and the engine joins it back.
        self.keywords = query.split(" ")
        self.results = self.shop.search(" ".join(self.keywords))
        self.page, self.page_no, self.asin, self.options = "results", 1, None, {}
        return Outcome("search")

    def _click(self, target: str) -> Outcome:
        if target == "search":
            raise ValueError("to search, type the query: search[what you are looking for]")
        on_page = self.clickables()
        if target not in on_page:
            shown = ", ".join(on_page[:12]) + (", ..." if len(on_page) > 12 else "")
            raise ValueError(f"{target[:60]!r} is not on this page; it offers: {shown}")
        if target == BACK_TO_SEARCH:
            self.page, self.keywords, self.results = "search", [], []
            self.page_no, self.asin, self.options = 1, None, {}
        elif self.page == "results":
            if target == NEXT_PAGE:
                self.page_no += 1
            elif target == PREV_PAGE:
                self.page_no -= 1
            else:
                self.asin = next(a for a in self._shown() if a.lower() == target)
                self.page = "item"
        elif self.page == "item":
            if target == PREV_PAGE:
                self.page = "results"
            elif target in SUB_PAGES:
                self.page = target
            elif target == BUY_NOW:
                return self._buy()
            else:
                # WebShop maps a value offered by two options to the last one's radio.
                names = [n for n, vs in self._product().options.items() if target in vs]
                self.options[names[-1]] = target
        elif target == PREV_PAGE:  # a sub-page
            self.page = "item"
        return Outcome("click")

    def _buy(self) -> Outcome:
        prod = self._product()
        price = self.shop.catalog.prices[prod.asin]
        self.reward, self.reward_info = purchase_reward(
            prod.reward_view(), self.goal, price, self.options
        )
        self.done, self.purchased = True, prod.asin
        return Outcome("purchase", self.reward, True)
