"""Shopping assistant: find the right products, fill the cart and check out."""
import json
import random


class ShopAssistant:
  """Three user requests judged on the cart and the order; each one pays a third."""

  max_turns = 10
  tools = [
      {"type": "function", "function": {
          "name": "search_products", "description": "Search the catalogue by keyword. Returns "
          "product ids, names, prices in cents and stock counts.",
          "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                         "required": ["query"]}}},
      {"type": "function", "function": {
          "name": "add_to_cart", "description": "Add a quantity of a product to the cart.",
          "parameters": {"type": "object", "properties": {
              "product_id": {"type": "string"}, "quantity": {"type": "integer"}},
              "required": ["product_id", "quantity"]}}},
      {"type": "function", "function": {
          "name": "remove_from_cart", "description": "Remove a product from the cart entirely.",
          "parameters": {"type": "object", "properties": {"product_id": {"type": "string"}},
                         "required": ["product_id"]}}},
      {"type": "function", "function": {
          "name": "checkout", "description": "Place the order for the current cart.",
          "parameters": {"type": "object", "properties": {
              "shipping": {"type": "string", "enum": ["standard", "express"]}},
              "required": ["shipping"]}}},
  ]
  reference_calls = [
      {"name": "search_products", "arguments": {"query": "<ITEM>"}},
      {"name": "add_to_cart", "arguments": {"product_id": "<WANT>", "quantity": "<N>"}},
      {"name": "search_products", "arguments": {"query": "<ITEM2>"}},
      {"name": "add_to_cart", "arguments": {"product_id": "<WANT2>", "quantity": 1}},
      {"name": "checkout", "arguments": {"shipping": "<SHIPPING>"}},
  ]
  ITEMS = ["notebook", "pen", "mug", "lamp", "backpack", "charger", "scarf", "kettle"]
  BRANDS = ["Acme", "Nova", "Zen", "Orbit", "Pico", "Vega"]

  def reset(self, seed=None):
    rng = random.Random(seed)
    self.item, self.item2 = rng.sample(self.ITEMS, 2)
    self.catalogue = {}
    for item in self.ITEMS:
      for brand in rng.sample(self.BRANDS, 3):
        pid = f"P{rng.randint(100, 999)}{len(self.catalogue)}"
        self.catalogue[pid] = {"name": f"{brand} {item}", "price_cents": rng.randint(300, 6000),
                               "stock": rng.choice([0, 2, 5, 9])}
    mine = [p for p, v in self.catalogue.items() if v["name"].endswith(self.item)]
    self.catalogue[mine[0]]["stock"] = 0
    self.catalogue[mine[1]]["stock"] = max(3, self.catalogue[mine[1]]["stock"])
    self.quantity = rng.randint(2, 3)
    stocked = [p for p in mine if self.catalogue[p]["stock"] >= self.quantity]
    self.want = min(stocked, key=lambda p: self.catalogue[p]["price_cents"])
    self.want2 = min([p for p, v in self.catalogue.items() if v["name"].endswith(self.item2)],
                     key=lambda p: self.catalogue[p]["price_cents"])
    self.catalogue[self.want2]["stock"] = max(1, self.catalogue[self.want2]["stock"])
    self.shipping = rng.choice(["standard", "express"])
    self.cart, self.order = {}, None
    self.requests = [
        f"Put {self.quantity} of the cheapest {self.item} that is in stock in my cart.",
        f"Also add one {self.item2}, the cheapest one available.",
        f"Great, please check out with {self.shipping} shipping.",
    ]
    self.stage, self.turn, self.total, self.done = 0, 0, 0.0, False
    fill = {"<ITEM>": self.item, "<WANT>": self.want, "<N>": self.quantity,
            "<ITEM2>": self.item2, "<WANT2>": self.want2, "<SHIPPING>": self.shipping}
    obs = ("You are a shopping assistant with tools search_products, add_to_cart, "
           "remove_from_cart and checkout. Use the "
           f"tools to do it; answer the user in plain text.\nUser: {self.requests[0]}")
    self.reference = self._reference(fill)
    return obs, {}

  def _reference(self, fill):
    return [{k: {a: fill.get(v, v) for a, v in c[k].items()} if k == "arguments"
             else fill.get(c[k], c[k]) for k in c} for c in self.reference_calls]

  def oracle_actions(self):
    """The reference calls and replies that complete this instance, from the hidden state."""
    return [call["reply"] if "reply" in call else call for call in self.reference]

  def _parse(self, action):
    """(tool, arguments) for a tool call (a dict), (None, text) for a plain reply."""
    if isinstance(action, dict):
      return action["name"], action["arguments"]
    return None, str(action)

  def _run(self, name, args):
    if self.order is not None:
      return {"error": "the order has already been placed"}
    if name == "search_products":
      query = str(args.get("query", "")).lower().strip()
      return [dict(v, product_id=p) for p, v in self.catalogue.items()
              if query and query in v["name"].lower()]
    if name == "checkout":
      if args.get("shipping") not in ("standard", "express") or not self.cart:
        return {"error": "shipping must be 'standard' or 'express' and the cart must not be empty"}
      self.order = (dict(self.cart), args["shipping"])
      return {"status": "ordered", "order_id": f"ORD-{len(self.cart)}{self.turn}"}
    pid = args.get("product_id")
    if pid not in self.catalogue:
      return {"error": f"unknown product_id {str(pid)[:20]!r}; search_products gives ids"}
    if name == "remove_from_cart":
      self.cart.pop(pid, None)
      return {"status": "ok", "cart": self.cart}
    qty = args.get("quantity")
    if not isinstance(qty, int) or isinstance(qty, bool) or qty < 1:
      return {"error": "quantity must be a positive integer"}
    if self.cart.get(pid, 0) + qty > self.catalogue[pid]["stock"]:
      return {"error": f"only {self.catalogue[pid]['stock']} in stock"}
    self.cart[pid] = self.cart.get(pid, 0) + qty
    return {"status": "ok", "cart": self.cart}

  def _satisfied(self):
    goal = {self.want: self.quantity}
    if self.stage == 0:
      return self.cart == goal
    goal[self.want2] = 1
    if self.stage == 1:
      return self.cart == goal
    return self.order == (goal, self.shipping)

  def step(self, action):
    if self.done:
      return "The conversation is over.", 0.0, True, False, {}
    self.turn += 1
    name, args = self._parse(action)
    tools = ("search_products", "add_to_cart", "remove_from_cart", "checkout")
    if name is None:
      obs = f"User: Please use the tools to do this: {self.requests[self.stage]}"
    elif name not in tools:
      obs = json.dumps({"error": f"no tool named {name!r}; tools: {', '.join(tools)}"})
    else:
      obs = json.dumps(self._run(name, args))
    reward = 0.0
    if name and self._satisfied():
      reward = min(1 / 3, 1.0 - self.total)
      self.total, self.stage = self.total + reward, self.stage + 1
      obs += f"\nUser: {self.requests[self.stage]}" if self.stage < len(self.requests) else ""
    terminated = self.stage == len(self.requests) or (self.order is not None and reward == 0)
    truncated = not terminated and self.turn >= self.max_turns
    self.done = terminated or truncated
    return obs, reward, terminated, truncated, {"stage": self.stage}
