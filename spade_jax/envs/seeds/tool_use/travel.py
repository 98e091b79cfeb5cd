"""Travel assistant: book an outbound and a return flight under constraints, report the cost."""
import json
import random
import re


class TravelBooking:
  """Three requests judged on the bookings and the reply; each one pays a third."""

  max_turns = 10
  tools = [
      {"type": "function", "function": {
          "name": "search_flights", "description": "Flights on one day (date YYYY-MM-DD) between "
          "two airport codes, with ids, departure and arrival times (HH:MM), price in USD and "
          "seats left.",
          "parameters": {"type": "object", "properties": {
              "origin": {"type": "string"}, "destination": {"type": "string"},
              "date": {"type": "string"}}, "required": ["origin", "destination", "date"]}}},
      {"type": "function", "function": {
          "name": "book_flight", "description": "Book one seat on a flight for a passenger.",
          "parameters": {"type": "object", "properties": {
              "flight_id": {"type": "string"}, "passenger": {"type": "string"}},
              "required": ["flight_id", "passenger"]}}},
      {"type": "function", "function": {
          "name": "cancel_booking", "description": "Cancel a booking by its id.",
          "parameters": {"type": "object", "properties": {"booking_id": {"type": "string"}},
                         "required": ["booking_id"]}}},
  ]
  reference_calls = [
      {"name": "search_flights", "arguments": {"origin": "<A>", "destination": "<B>",
                                               "date": "<DAY1>"}},
      {"name": "book_flight", "arguments": {"flight_id": "<OUT>", "passenger": "<PASSENGER>"}},
      {"name": "search_flights", "arguments": {"origin": "<B>", "destination": "<A>",
                                               "date": "<DAY2>"}},
      {"name": "book_flight", "arguments": {"flight_id": "<BACK>", "passenger": "<PASSENGER>"}},
      {"reply": "<TOTAL>"},
  ]
  AIRPORTS = ["SFO", "JFK", "ORD", "SEA", "BOS", "DEN", "ATL", "MIA"]
  PEOPLE = ["Ada Park", "Ben Ortiz", "Chloe Wu", "Dan Reyes", "Emma Stone", "Farid Khan"]

  def reset(self, seed=None):
    rng = random.Random(seed)
    self.a, self.b = rng.sample(self.AIRPORTS, 2)
    self.days = [f"2026-05-{d:02d}" for d in sorted(rng.sample(range(1, 29), 2))]
    self.passenger = rng.choice(self.PEOPLE)
    while True:
      self._make_flights(rng)
      out = [f for f, v in self.flights.items() if v["date"] == self.days[0]]
      back = [f for f, v in self.flights.items() if v["date"] == self.days[1]]
      self.deadline = self.flights[rng.choice(out[2:])]["arrive"] + 15
      early = [f for f in out if self.flights[f]["arrive"] < self.deadline
               and self.flights[f]["seats"]]
      self.after = self.flights[rng.choice(back[1:])]["depart"] - 15
      later = [f for f in back if self.flights[f]["depart"] > self.after
               and self.flights[f]["seats"]]
      prices = sorted(self.flights[f]["price"] for f in early)
      if early and later and (len(prices) == 1 or prices[0] != prices[1]):
        break
    self.want = min(early, key=lambda f: self.flights[f]["price"])
    self.want2 = later[0]
    self.bookings = {}
    hm = self._hm
    self.requests = [
        f"Book me ({self.passenger}) the cheapest flight from {self.a} to {self.b} on "
        f"{self.days[0]} that lands before {hm(self.deadline)}.",
        f"Now the return from {self.b} to {self.a} on {self.days[1]}: the earliest flight "
        f"leaving after {hm(self.after)}.",
        "What do the two tickets cost together? Answer in dollars.",
    ]
    self.cost = self.flights[self.want]["price"] + self.flights[self.want2]["price"]
    self.stage, self.turn, self.total, self.done = 0, 0, 0.0, False
    fill = {"<A>": self.a, "<B>": self.b, "<DAY1>": self.days[0], "<DAY2>": self.days[1],
            "<OUT>": self.want, "<BACK>": self.want2, "<PASSENGER>": self.passenger,
            "<TOTAL>": f"${self.cost}"}
    obs = ("You are a travel assistant with tools search_flights, book_flight and "
           "cancel_booking. Use the "
           f"tools to do it; answer the user in plain text.\nUser: {self.requests[0]}")
    self.reference = self._reference(fill)
    return obs, {}

  def _make_flights(self, rng):
    self.flights = {}
    for origin, dest, day in ((self.a, self.b, self.days[0]), (self.b, self.a, self.days[1])):
      for dep in sorted(rng.sample(range(6 * 60, 21 * 60, 30), 6)):
        fid = f"{rng.choice(['UA', 'DL', 'AA'])}{rng.randint(100, 999)}{len(self.flights)}"
        self.flights[fid] = {"origin": origin, "destination": dest, "date": day, "depart": dep,
                             "arrive": dep + rng.randint(90, 330), "price": rng.randint(89, 640),
                             "seats": rng.choice([0, 1, 4, 9])}

  def _hm(self, minutes):
    return f"{minutes // 60:02d}:{minutes % 60:02d}"

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
    hm = self._hm
    if name == "search_flights":
      keys = ("origin", "destination", "date")
      return [{"flight_id": f, "depart": hm(v["depart"]), "arrive": hm(v["arrive"]),
               "price_usd": v["price"], "seats_left": v["seats"]}
              for f, v in self.flights.items()
              if all(str(args.get(k, "")).upper() == v[k].upper() for k in keys)]
    if name == "cancel_booking":
      booking = self.bookings.pop(str(args.get("booking_id")), None)
      if booking is None:
        return {"error": "unknown booking_id"}
      self.flights[booking[0]]["seats"] += 1
      return {"status": "cancelled"}
    flight = self.flights.get(str(args.get("flight_id")))
    if flight is None or not str(args.get("passenger", "")).strip():
      return {"error": "need a flight_id from search_flights and the passenger's name"}
    if flight["seats"] == 0:
      return {"error": "no seats left on this flight"}
    flight["seats"] -= 1
    bid = f"BK{len(self.bookings) + 1}{self.turn}"
    self.bookings[bid] = (str(args["flight_id"]), str(args["passenger"]).strip())
    return {"status": "booked", "booking_id": bid, "price_usd": flight["price"]}

  def _satisfied(self, reply):
    booked = sorted(self.bookings.values())
    mine = sorted([(self.want, self.passenger)] + [(self.want2, self.passenger)] * (self.stage > 0))
    if self.stage < 2:
      return [(f, p.lower()) for f, p in booked] == [(f, p.lower()) for f, p in mine]
    numbers = re.findall(r"\d+(?:\.\d+)?", (reply or "").replace(",", ""))
    return bool(numbers) and float(numbers[-1]) == self.cost

  def step(self, action):
    if self.done:
      return "The conversation is over.", 0.0, True, False, {}
    self.turn += 1
    name, payload = self._parse(action)
    tools = ("search_flights", "book_flight", "cancel_booking")
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
