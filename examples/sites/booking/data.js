// Fixed flight data: [from, to, airline, flight, depart, arrive, duration min, stops, airport to, economy USD]
const FLIGHTS = [
  ["Singapore", "Beijing", "Air China", "CA976", "08:05", "14:25", 380, 0, "PEK Beijing Capital", 412],
  ["Singapore", "Beijing", "Singapore Airlines", "SQ806", "00:45", "07:05", 380, 0, "PEK Beijing Capital", 468],
  ["Singapore", "Beijing", "China Eastern", "MU568", "10:10", "16:40", 390, 0, "PKX Beijing Daxing", 355],
  ["Singapore", "Beijing", "Cathay Pacific", "CX710", "07:00", "17:45", 645, 1, "PEK Beijing Capital", 298],
  ["Singapore", "Tokyo", "Japan Airlines", "JL712", "07:40", "15:35", 415, 0, "NRT Tokyo Narita", 520],
  ["London", "Paris", "Air France", "AF1081", "07:15", "09:30", 75, 0, "CDG Paris Charles de Gaulle", 96],
  ["London", "Paris", "British Airways", "BA304", "10:35", "12:50", 75, 0, "CDG Paris Charles de Gaulle", 118],
  ["London", "Paris", "Air France", "AF1681", "13:40", "15:55", 75, 0, "CDG Paris Charles de Gaulle", 84],
  ["Paris", "London", "Air France", "AF1180", "14:20", "14:40", 80, 0, "LHR London Heathrow", 101],
  ["Paris", "London", "British Airways", "BA317", "16:05", "16:25", 80, 0, "LHR London Heathrow", 92],
];
const CABIN_FACTOR = { ECONOMY: 1, PREMIUM_ECONOMY: 1.6, BUSINESS: 3.2, FIRST: 5.5 };
const TICKETS = [
  ["Universal Studios Singapore", "Adult (13-59 years)", 83],
  ["Universal Studios Singapore", "Child (4-12 years)", 62],
  ["Universal Studios Singapore", "Senior (60 years and above)", 48],
  ["S.E.A. Aquarium", "Adult (13-59 years)", 43],
  ["S.E.A. Aquarium", "Child (4-12 years)", 32],
];
