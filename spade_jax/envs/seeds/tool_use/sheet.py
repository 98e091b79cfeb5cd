"""Spreadsheet assistant: build summary tables by chaining filter, aggregate and sort tools."""
import json
import random
import re


class SheetTransform:
  """Two requests: a derived table judged on its exact rows, then a question about the data."""

  max_turns = 10
  tools = [
      {"type": "function", "function": {
          "name": "read_table", "description": "Return all rows of a table as a list of objects.",
          "parameters": {"type": "object", "properties": {"table": {"type": "string"}},
                         "required": ["table"]}}},
      {"type": "function", "function": {
          "name": "filter_rows", "description": "Keep the rows whose column equals value; write "
          "them to a new table named output.",
          "parameters": {"type": "object", "properties": {
              "table": {"type": "string"}, "column": {"type": "string"},
              "value": {"type": "string"}, "output": {"type": "string"}},
              "required": ["table", "column", "value", "output"]}}},
      {"type": "function", "function": {
          "name": "aggregate", "description": "Group rows by one column and combine another with "
          "op (sum, count, max or min); rows of the output are {group_by: key, column: result}.",
          "parameters": {"type": "object", "properties": {
              "table": {"type": "string"}, "group_by": {"type": "string"},
              "column": {"type": "string"}, "op": {"type": "string",
                                                   "enum": ["sum", "count", "max", "min"]},
              "output": {"type": "string"}},
              "required": ["table", "group_by", "column", "op", "output"]}}},
      {"type": "function", "function": {
          "name": "sort_table", "description": "Sort a table by a column into a new table.",
          "parameters": {"type": "object", "properties": {
              "table": {"type": "string"}, "column": {"type": "string"},
              "descending": {"type": "boolean"}, "output": {"type": "string"}},
              "required": ["table", "column", "descending", "output"]}}},
  ]
  reference_calls = [
      {"name": "filter_rows", "arguments": {"table": "sales", "column": "region",
                                            "value": "<REGION>", "output": "step1"}},
      {"name": "aggregate", "arguments": {"table": "step1", "group_by": "product",
                                          "column": "units", "op": "sum", "output": "step2"}},
      {"name": "sort_table", "arguments": {"table": "step2", "column": "units",
                                           "descending": True, "output": "<OUT>"}},
      {"name": "filter_rows", "arguments": {"table": "sales", "column": "region",
                                            "value": "<REGION2>", "output": "step3"}},
      {"name": "aggregate", "arguments": {"table": "step3", "group_by": "product",
                                          "column": "units", "op": "max", "output": "step4"}},
      {"name": "sort_table", "arguments": {"table": "step4", "column": "units",
                                           "descending": True, "output": "step5"}},
      {"reply": "<BEST>"},
  ]
  PRODUCTS = ["tea", "coffee", "cocoa", "juice", "water", "soda"]
  REGIONS = ["North", "South", "East", "West"]

  def reset(self, seed=None):
    rng = random.Random(seed)
    products = rng.sample(self.PRODUCTS, 4)
    while True:
      rows = [{"region": rng.choice(self.REGIONS), "product": rng.choice(products),
               "month": rng.choice(["Jan", "Feb", "Mar"]), "units": rng.randint(1, 60)}
              for _ in range(24)]
      region, region2 = rng.sample(self.REGIONS, 2)
      totals = self._group([r for r in rows if r["region"] == region], "product", "units", "sum")
      peaks = self._group([r for r in rows if r["region"] == region2], "product", "units", "max")
      if (len(totals) >= 3 and len(set(totals.values())) == len(totals) and len(peaks) >= 2
          and sorted(peaks.values())[-1] != sorted(peaks.values())[-2]):
        break
    self.tables = {"sales": rows}
    self.out = rng.choice(["summary", "report", "totals"]) + f"_{region.lower()}"
    self.expected = [{"product": p, "units": u}
                     for p, u in sorted(totals.items(), key=lambda kv: -kv[1])]
    self.best = max(peaks, key=peaks.get)
    self.requests = [
        f"Make a table named '{self.out}' with the total units per product in the {region} "
        "region, from most to fewest units. Columns: product, units.",
        f"In the {region2} region, which product had the single largest sale (the most units in "
        "one row)? Just tell me the product.",
    ]
    self.stage, self.turn, self.total, self.done = 0, 0, 0.0, False
    obs = ("You are a spreadsheet assistant. The table 'sales' has columns region, product, "
           "month and units. Tools: read_table, filter_rows, aggregate, sort_table. Use the "
           f"tools to do it; answer the user in plain text.\nUser: {self.requests[0]}")
    fill = {"<REGION>": region, "<REGION2>": region2, "<OUT>": self.out, "<BEST>": self.best}
    self.reference = self._reference(fill)
    return obs, {}

  def _group(self, rows, key, column, op):
    groups = {}
    for row in rows:
      groups.setdefault(row[key], []).append(row[column])
    combine = {"sum": sum, "count": len, "max": max, "min": min}[op]
    return {k: combine(v) for k, v in groups.items()}

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
    rows = self.tables.get(str(args.get("table")))
    if rows is None:
      return {"error": f"no table {str(args.get('table'))[:30]!r}; tables: {sorted(self.tables)}"}
    if name == "read_table":
      return rows
    column, output = str(args.get("column")), str(args.get("output", "")).strip()
    if not output or len(self.tables) > 40 or not rows or column not in rows[0]:
      columns = list(rows[0]) if rows else []
      return {"error": f"need an output name and a column of the table: {columns}"}
    if name == "filter_rows":
      result = [r for r in rows if str(r[column]) == str(args.get("value"))]
    elif name == "sort_table":
      result = sorted(rows, key=lambda r: r[column], reverse=bool(args.get("descending")))
    else:
      key, op = str(args.get("group_by")), args.get("op")
      if key not in rows[0] or op not in ("sum", "count", "max", "min"):
        return {"error": "group_by must be a column and op one of sum, count, max, min"}
      result = [{key: k, column: v} for k, v in self._group(rows, key, column, op).items()]
    self.tables[output] = result
    return {"status": "ok", "table": output, "rows": len(result)}

  def _satisfied(self, reply):
    if self.stage == 0:
      return self.tables.get(self.out) == self.expected
    mentioned = [p for p in self.PRODUCTS if re.search(rf"\b{p}\b", (reply or "").lower())]
    return mentioned == [self.best]

  def step(self, action):
    if self.done:
      return "The conversation is over.", 0.0, True, False, {}
    self.turn += 1
    name, payload = self._parse(action)
    tools = ("read_table", "filter_rows", "aggregate", "sort_table")
    if name is None:
      obs = ""
    elif name not in tools:
      obs = json.dumps({"error": f"no tool named {name!r}; tools: {', '.join(tools)}"})
    else:
      obs = json.dumps(self._run(name, payload))[:3000]
    reward = 0.0
    if self._satisfied(payload if name is None else None):
      reward = min(0.5, 1.0 - self.total)
      self.total += reward
      self.stage += 1
      obs += f"\nUser: {self.requests[1]}" if self.stage == 1 else ""
    elif name is None:
      obs = f"User: That does not settle it yet. {self.requests[self.stage]}"
    terminated = self.stage == len(self.requests)
    truncated = not terminated and self.turn >= self.max_turns
    self.done = terminated or truncated
    return obs.strip() or "User: Thanks!", reward, terminated, truncated, {"stage": self.stage}
