"""Calendar assistant: cancel a meeting, book the earliest free slot, count meetings."""
import json
import random
import re


class CalendarAssistant:
  """Three user requests judged on the calendar state; each one pays a third."""

  max_turns = 10
  tools = [
      {"type": "function", "function": {
          "name": "list_events", "description": "List the events of one day (date YYYY-MM-DD) "
          "with ids, titles and start/end times (HH:MM, 24-hour).",
          "parameters": {"type": "object", "properties": {"date": {"type": "string"}},
                         "required": ["date"]}}},
      {"type": "function", "function": {
          "name": "create_event", "description": "Create an event. Fails if it overlaps another.",
          "parameters": {"type": "object", "properties": {
              "date": {"type": "string"}, "title": {"type": "string"},
              "start": {"type": "string", "description": "HH:MM"},
              "end": {"type": "string", "description": "HH:MM"}},
              "required": ["date", "title", "start", "end"]}}},
      {"type": "function", "function": {
          "name": "delete_event", "description": "Delete an event by id.",
          "parameters": {"type": "object", "properties": {"event_id": {"type": "string"}},
                         "required": ["event_id"]}}},
  ]
  reference_calls = [
      {"name": "list_events", "arguments": {"date": "<DAY>"}},
      {"name": "delete_event", "arguments": {"event_id": "<CANCEL>"}},
      {"name": "create_event", "arguments": {"date": "<DAY>", "title": "<TITLE>",
                                             "start": "<START>", "end": "<END>"}},
      {"name": "list_events", "arguments": {"date": "<DAY2>"}},
      {"reply": "<COUNT>"},
  ]
  TITLES = ["Standup", "Design review", "1:1 with Sam", "Budget sync", "Lunch with Ana",
            "Interview", "Dentist", "Team retro", "Client call", "Gym"]

  def reset(self, seed=None):
    rng = random.Random(seed)
    self.days = [f"2026-03-{d:02d}" for d in sorted(rng.sample(range(2, 28), 2))]
    self.events, titles = {}, rng.sample(self.TITLES, 8)
    for day in self.days:
      hours = sorted(rng.sample(range(9, 17), rng.randint(3, 5)))
      for h in hours:
        eid = f"E{rng.randint(100, 999)}{len(self.events)}"
        self.events[eid] = {"date": day, "title": titles[len(self.events) % 8],
                            "start": h * 60, "end": h * 60 + rng.choice([30, 60])}
    day_events = [e for e, v in self.events.items() if v["date"] == self.days[0]]
    self.cancel = rng.choice(day_events)
    self.new_title = rng.choice(["Project kickoff", "Planning", "Coffee chat", "Workshop"])
    self.requests = [
        f"Cancel my '{self.events[self.cancel]['title']}' on {self.days[0]}.",
        f"Book a 60-minute '{self.new_title}' on {self.days[0]} at the earliest time between "
        "09:00 and 17:00 when I am free.",
        f"How many events do I have on {self.days[1]}?",
    ]
    self.slot = None
    self.stage, self.turn, self.total, self.done = 0, 0, 0.0, False
    slot = self._free_slot({e: v for e, v in self.events.items() if e != self.cancel})
    fill = {"<DAY>": self.days[0], "<DAY2>": self.days[1], "<CANCEL>": self.cancel,
            "<TITLE>": self.new_title, "<START>": self._hm(slot), "<END>": self._hm(slot + 60),
            "<COUNT>": str(sum(v["date"] == self.days[1] for v in self.events.values()))}
    obs = ("You are a calendar assistant with tools list_events, create_event and delete_event. "
           "Use the tools to do it; answer the "
           f"user in plain text.\nUser: {self.requests[0]}")
    self.reference = self._reference(fill)
    return obs, {}

  def _hm(self, minutes):
    return f"{minutes // 60:02d}:{minutes % 60:02d}"

  def _free_slot(self, events):
    busy = [(v["start"], v["end"]) for v in events.values() if v["date"] == self.days[0]]
    return next(t for t in range(9 * 60, 16 * 60 + 1, 30)
                if all(t + 60 <= s or t >= e for s, e in busy))

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
    if name == "list_events":
      return [{"event_id": e, "title": v["title"], "start": self._hm(v["start"]),
               "end": self._hm(v["end"])} for e, v in sorted(
                   self.events.items(), key=lambda kv: kv[1]["start"])
              if v["date"] == args.get("date")]
    if name == "delete_event":
      if self.events.pop(str(args.get("event_id")), None) is None:
        return {"error": "no event with that id; list_events shows ids"}
      return {"status": "deleted"}
    times = [re.fullmatch(r"([01]\d|2[0-3]):([0-5]\d)", str(args.get(k, ""))) for k in
             ("start", "end")]
    if not all(times) or args.get("date") not in self.days or not args.get("title"):
      return {"error": "need date (YYYY-MM-DD of an existing workday), title, start and end as "
                       "HH:MM"}
    start, end = (int(m.group(1)) * 60 + int(m.group(2)) for m in times)
    clash = [v["title"] for v in self.events.values() if v["date"] == args["date"]
             and start < v["end"] and v["start"] < end]
    if end <= start or clash:
      return {"error": f"invalid time range or overlap with {clash}"}
    eid = f"E{len(self.events)}{self.turn}"
    self.events[eid] = {"date": args["date"], "title": str(args["title"]), "start": start,
                        "end": end}
    return {"status": "created", "event_id": eid}

  def _satisfied(self, reply):
    if self.stage == 0:
      return self.cancel not in self.events
    if self.stage == 1:
      slot = self._free_slot({e: v for e, v in self.events.items() if v["title"] !=
                              self.new_title})
      return any(v["date"] == self.days[0] and v["start"] == slot and v["end"] == slot + 60
                 and v["title"].lower() == self.new_title.lower() for v in self.events.values())
    if reply is None:
      return False
    count = sum(v["date"] == self.days[1] for v in self.events.values())
    numbers = re.findall(r"\d+", re.sub(r"\d{4}-\d\d-\d\d|\d?\d:\d\d", " ", reply))
    return numbers[:1] == [str(count)]

  def step(self, action):
    if self.done:
      return "The conversation is over.", 0.0, True, False, {}
    self.turn += 1
    name, payload = self._parse(action)
    tools = ("list_events", "create_event", "delete_event")
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
