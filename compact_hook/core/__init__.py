"""The pure core: items, units and pairing, partition, tiers, fit, normalization, digest,
transcript, prefix chain and limits. Synchronous, no I/O, and no wire format: the formats
package turns requests into ``items.Item`` and back.
"""
