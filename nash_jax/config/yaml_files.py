"""YAML read strictly: safe_load that refuses a key given twice in one mapping."""

import yaml


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a mapping with the same key twice (YAML keeps the last silently)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears twice in one mapping; expected each key once",
                    key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def safe_load_unique(text):
    """yaml.safe_load, refusing duplicate keys."""
    return yaml.load(text, Loader=_UniqueKeyLoader)
