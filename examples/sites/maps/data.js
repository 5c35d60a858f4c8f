// Fixed place data: [name, place id, type, city, rating, latitude, longitude]
const PLACES = [
  ["University of Delhi", "mtg-place-dl-001", "university", "New Delhi", 4.5, 28.6886, 77.2100],
  ["Jamia Millia Islamia", "mtg-place-dl-002", "university", "New Delhi", 4.3, 28.5616, 77.2802],
  ["Guru Gobind Singh Indraprastha University", "mtg-place-dl-003", "university", "New Delhi", 4.2, 28.5946, 77.0190],
  ["Qutub Minar", "mtg-place-dl-010", "monument", "New Delhi", 4.6, 28.5245, 77.1855],
  ["Red Fort", "mtg-place-dl-011", "monument", "New Delhi", 4.5, 28.6562, 77.2410],
  ["Hotel Tugu Malang", "mtg-place-id-101", "hotel", "Malang", 4.7, -7.9771, 112.6340],
  ["Warung Bu Kris", "mtg-place-id-102", "restaurant", "Semarang", 4.4, -6.9932, 110.4203],
  ["Rest Area KM 429", "mtg-place-id-103", "gas station", "Semarang", 4.1, -7.0600, 110.3500],
  ["Gudeg Yu Djum", "mtg-place-id-104", "restaurant", "Yogyakarta", 4.6, -7.7700, 110.3800],
  ["Aire de Chartres", "mtg-place-fr-201", "gas station", "Chartres", 4.2, 48.4300, 1.4800],
  ["Le Bistrot du Musee", "mtg-place-fr-202", "restaurant", "Le Mans", 4.5, 47.9400, 0.2100],
];
// Fixed routes: [origin, destination, route name, via cities, distance km, duration]
const ROUTES = [
  ["Jakarta", "Surabaya", "Northern coast (Pantura)", ["Cirebon", "Semarang", "Tuban"], 782, "12 h 40 min"],
  ["Jakarta", "Surabaya", "Trans-Java toll road", ["Bandung", "Yogyakarta", "Solo"], 805, "10 h 55 min"],
  ["Jakarta", "Surabaya", "Southern hills", ["Tasikmalaya", "Purwokerto", "Malang"], 910, "14 h 10 min"],
  ["Disneyland Paris", "Le Mans", "A10 / A11", ["Versailles", "Chartres", "La Ferte-Bernard"], 262, "2 h 55 min"],
];
