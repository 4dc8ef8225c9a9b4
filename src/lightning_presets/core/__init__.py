"""The data model every other layer reads: findings, rules, contexts, preset models, namespaces, codes.

Nothing here imports torch or Lightning: the start-up hook and the CLI's usage errors stay cheap.
"""
