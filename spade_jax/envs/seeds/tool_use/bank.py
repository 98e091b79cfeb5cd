"""Banking assistant: move money, pay a bill and report a balance through tools."""
import json
import random
import re


class BankAssistant:
  """Three user requests; each one satisfied (judged on the account state) pays a third."""

  max_turns = 10
  tools = [
      {"type": "function", "function": {
          "name": "list_accounts", "parameters": {"type": "object", "properties": {}},
          "description": "List the user's accounts: ids, names and balances in integer cents."}},
      {"type": "function", "function": {
          "name": "transfer", "description": "Move money between two of the user's accounts.",
          "parameters": {"type": "object", "properties": {
              "from_account_id": {"type": "string"}, "to_account_id": {"type": "string"},
              "amount_cents": {"type": "integer", "description": "amount in cents, > 0"}},
              "required": ["from_account_id", "to_account_id", "amount_cents"]}}},
      {"type": "function", "function": {
          "name": "pay_bill", "description": "Pay a registered payee from an account.",
          "parameters": {"type": "object", "properties": {
              "account_id": {"type": "string"}, "payee": {"type": "string"},
              "amount_cents": {"type": "integer"}},
              "required": ["account_id", "payee", "amount_cents"]}}},
  ]
  reference_calls = [
      {"name": "list_accounts", "arguments": {}},
      {"name": "transfer", "arguments": {"from_account_id": "<SRC>", "to_account_id": "<DST>",
                                         "amount_cents": "<AMOUNT>"}},
      {"name": "pay_bill", "arguments": {"account_id": "<SRC>", "payee": "<PAYEE>",
                                         "amount_cents": "<BILL>"}},
      {"reply": "<SRC balance in dollars>"},
  ]
  NAMES = ["checking", "savings", "holiday fund", "emergency fund", "joint"]
  PAYEES = ["electricity", "water", "internet", "phone", "gym"]

  def reset(self, seed=None):
    rng = random.Random(seed)
    names = rng.sample(self.NAMES, 3)
    self.ids = {n: f"ACC-{rng.randint(1000, 9999)}{i}" for i, n in enumerate(names)}
    self.balance = {self.ids[n]: rng.randint(50000, 400000) for n in names}
    self.start = dict(self.balance)
    self.payees, self.paid = rng.sample(self.PAYEES, 3), []
    self.src, self.dst, self.payee = self.ids[names[0]], self.ids[names[1]], self.payees[0]
    self.amount = rng.randint(20, 300) * 100 + rng.choice([0, 50, 99])
    self.bill = rng.randint(1500, 12000)
    self.requests = [
        f"Please move ${self.amount / 100:.2f} from my {names[0]} account to my {names[1]} "
        "account.",
        f"Now pay my {self.payee} bill of ${self.bill / 100:.2f} from the {names[0]} account.",
        f"What is the balance of my {names[0]} account now? Answer in dollars.",
    ]
    self.stage, self.turn, self.total, self.done = 0, 0, 0.0, False
    left = self.start[self.src] - self.amount - self.bill
    fill = {"<SRC>": self.src, "<DST>": self.dst, "<AMOUNT>": self.amount, "<BILL>": self.bill,
            "<PAYEE>": self.payee, "<SRC balance in dollars>": f"${left / 100:,.2f}"}
    obs = ("You are a banking assistant with tools list_accounts, transfer and pay_bill. Use the "
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
    if name == "list_accounts":
      names = {v: k for k, v in self.ids.items()}
      return [{"id": i, "name": names[i], "balance_cents": b} for i, b in self.balance.items()]
    amount = args.get("amount_cents")
    if not isinstance(amount, int) or isinstance(amount, bool) or amount <= 0:
      return {"error": "amount_cents must be a positive integer number of cents"}
    if name == "transfer":
      src, dst = args.get("from_account_id"), args.get("to_account_id")
      if src not in self.balance or dst not in self.balance or src == dst:
        return {"error": "unknown or identical account ids; call list_accounts for the ids"}
      moved = min(amount, self.balance[src])
      self.balance[src] -= moved
      self.balance[dst] += moved
      return {"status": "ok", "moved_cents": moved, "balances": dict(self.balance)}
    account, payee = args.get("account_id"), args.get("payee")
    if account not in self.balance or payee not in self.payees:
      return {"error": f"unknown account id or payee; payees are {self.payees}"}
    if amount > self.balance[account]:
      return {"error": "insufficient funds"}
    self.balance[account] -= amount
    self.paid.append((account, payee, amount))
    return {"status": "paid", "payee": payee, "balance_cents": self.balance[account]}

  def _satisfied(self, reply):
    if self.stage == 0:
      return (self.start[self.src] - self.balance[self.src] == self.amount
              and self.balance[self.dst] - self.start[self.dst] == self.amount)
    if self.stage == 1:
      return (self.src, self.payee, self.bill) in self.paid
    numbers = re.findall(r"\d[\d,]*\.\d\d", reply or "")
    return bool(numbers) and round(float(numbers[-1].replace(",", "")) * 100) == self.balance[
        self.src]

  def step(self, action):
    if self.done:
      return "The conversation is over.", 0.0, True, False, {}
    self.turn += 1
    name, payload = self._parse(action)
    tools = ("list_accounts", "transfer", "pay_bill")
    if name is None:
      obs = ""
    elif name not in tools:
      obs = json.dumps({"error": f"no tool named {name!r}; tools: {', '.join(tools)}"})
    else:
      obs = json.dumps(self._run(name, payload))
    reward = 0.0
    if self._satisfied(payload if name is None else None):
      reward = min(1 / 3, 1.0 - self.total)
      self.total, self.stage = self.total + reward, self.stage + 1
      obs += f"\nUser: {self.requests[self.stage]}" if self.stage < len(self.requests) else ""
    elif name is None:
      obs = f"User: That does not settle it yet. {self.requests[self.stage]}"
    terminated = self.stage == len(self.requests)
    truncated = not terminated and self.turn >= self.max_turns
    self.done = terminated or truncated
    return obs.strip() or "User: Thanks!", reward, terminated, truncated, {"stage": self.stage}
