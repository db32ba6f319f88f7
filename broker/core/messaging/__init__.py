"""Messaging: the send path, asks and replies, target resolution, delivery and message
id deduplication."""
