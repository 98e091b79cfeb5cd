"""Company directory: answer questions that need chained employee lookups."""
import json
import random


class DirectoryLookup:
  """Three questions answered in plain text after tool lookups; each right answer pays a third."""

  max_turns = 10
  tools = [
      {"type": "function", "function": {
          "name": "search_people", "description": "Find employees whose name contains the text. "
          "Returns employee ids, names and departments only.",
          "parameters": {"type": "object", "properties": {"name": {"type": "string"}},
                         "required": ["name"]}}},
      {"type": "function", "function": {
          "name": "get_person", "description": "Full record of one employee: title, email, "
          "phone and the employee id of their manager (null for the CEO).",
          "parameters": {"type": "object", "properties": {"employee_id": {"type": "string"}},
                         "required": ["employee_id"]}}},
  ]
  reference_calls = [
      {"name": "search_people", "arguments": {"name": "<A>"}},
      {"name": "get_person", "arguments": {"employee_id": "<A_ID>"}},
      {"name": "get_person", "arguments": {"employee_id": "<MANAGER_ID>"}},
      {"reply": "<MANAGER_EMAIL>"},
      {"name": "search_people", "arguments": {"name": "<B>"}},
      {"name": "get_person", "arguments": {"employee_id": "<B_ID>"}},
      {"reply": "<B_PHONE>"},
      {"name": "get_person", "arguments": {"employee_id": "<BOSS_ID>"}},
      {"reply": "<BOSS_NAME>"},
  ]
  FIRST = ["Alex", "Maya", "Omar", "Lena", "Ravi", "Sofia", "Jonas", "Keiko", "Tom", "Nadia",
           "Paul", "Ines"]
  LAST = ["Berg", "Costa", "Diaz", "Eklund", "Fischer", "Grant", "Haddad", "Ito", "Jensen",
          "Kowal", "Lopez", "Moreau"]
  DEPTS = ["Sales", "Engineering", "Finance", "Legal", "Design"]
  TITLES = ["CEO", "VP", "VP", "Lead", "Lead", "Lead", "Analyst", "Engineer", "Designer",
            "Associate"]

  def reset(self, seed=None):
    rng = random.Random(seed)
    names = [f"{first} {last}" for first, last in zip(rng.sample(self.FIRST, 10),
                                                      rng.sample(self.LAST, 10), strict=True)]
    managers = [None, 0, 0, rng.choice([1, 2]), rng.choice([1, 2]), rng.choice([1, 2])]
    managers += [rng.choice([3, 4, 5]) for _ in range(4)]
    self.people = {}
    for i, name in enumerate(names):
      self.people[f"U{rng.randint(10, 99)}{i}"] = {
          "name": name, "department": rng.choice(self.DEPTS), "title": self.TITLES[i],
          "email": name.lower().replace(" ", ".") + "@corp.example",
          "phone": f"+1-555-{rng.randint(1000, 9999)}", "manager": managers[i]}
    ids = list(self.people)
    for record in self.people.values():
      record["manager_id"] = None if record["manager"] is None else ids[record.pop("manager")]
      record.pop("manager", None)
    a, b = rng.sample(ids[6:], 2)
    twin = dict(self.people[b], phone=f"+1-555-{rng.randint(1000, 9999)}",
                department=rng.choice([d for d in self.DEPTS
                                       if d != self.people[b]["department"]]))
    twin["email"] = twin["email"].replace("@", "2@")
    self.people[f"U{rng.randint(10, 99)}{len(ids)}"] = twin
    manager = self.people[a]["manager_id"]
    boss = self.people[manager]["manager_id"]
    self.answers = [self.people[manager]["email"], self.people[b]["phone"],
                    self.people[boss]["name"]]
    self.wrong = [None, twin["phone"], None]
    self.requests = [
        f"What is the email address of {self.people[a]['name']}'s manager?",
        f"I also need the phone number of {self.people[b]['name']} from "
        f"{self.people[b]['department']}.",
        "Who does that manager (the one whose email you gave me) report to? Full name, please.",
    ]
    self.stage, self.turn, self.total, self.done = 0, 0, 0.0, False
    fill = {"<A>": self.people[a]["name"], "<A_ID>": a, "<MANAGER_ID>": manager,
            "<MANAGER_EMAIL>": self.answers[0], "<B>": self.people[b]["name"], "<B_ID>": b,
            "<B_PHONE>": self.answers[1], "<BOSS_ID>": boss, "<BOSS_NAME>": self.answers[2]}
    obs = ("You are an assistant with the company directory tools search_people and get_person. "
           "Use the tools to do it; answer the "
           f"user in plain text.\nUser: {self.requests[0]}")
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
    if name == "search_people":
      text = str(args.get("name", "")).lower().strip()
      return [{"employee_id": i, "name": p["name"], "department": p["department"]}
              for i, p in self.people.items() if text and text in p["name"].lower()]
    record = self.people.get(str(args.get("employee_id")))
    if record is None:
      return {"error": "unknown employee_id; search_people gives ids"}
    return dict(record, employee_id=str(args.get("employee_id")))

  def _satisfied(self, reply):
    if reply is None:
      return False
    text = reply.lower()[:300]
    right = self.answers[self.stage].lower() in text
    return right and not (self.wrong[self.stage] and self.wrong[self.stage].lower() in text)

  def step(self, action):
    if self.done:
      return "The conversation is over.", 0.0, True, False, {}
    self.turn += 1
    name, payload = self._parse(action)
    reward, obs = 0.0, ""
    if name is None and self._satisfied(payload):
      reward = min(1 / 3, 1.0 - self.total)
      self.total += reward
      self.stage += 1
      obs = f"User: {self.requests[self.stage]}" if self.stage < 3 else "User: Thanks!"
    elif name is None:
      obs = f"User: That does not answer my question. {self.requests[self.stage]}"
    elif name not in ("search_people", "get_person"):
      obs = json.dumps({"error": f"no tool named {name!r}; tools: search_people, get_person"})
    else:
      obs = json.dumps(self._run(name, payload))
    terminated = self.stage == len(self.requests)
    truncated = not terminated and self.turn >= self.max_turns
    self.done = terminated or truncated
    return obs, reward, terminated, truncated, {"stage": self.stage}
