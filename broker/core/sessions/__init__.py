"""Sessions: the registry of connected sessions, their arrival and departure, presence,
identity reclaim, authority and grants, control connections and read backlogs."""
