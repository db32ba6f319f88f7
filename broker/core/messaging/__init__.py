"""Messaging: delivery and its receipts, message ids, asks and replies, ask cycles, a
person's gate on what reaches a session, and the flood and loop guard between two
sessions. Where a request goes is the routing room's, above."""
