"""Which of the reference's weights a ModelNew gets: by name, else by a shape only one weight of each side has.

KernelBench loads the reference's state into the candidate where names and shapes match; kernels from other
harnesses often rename them (the reference's ``linear.weight`` kept as ``self.weight``), and their authors' harnesses
map by shape. Here a weight the names did not match goes to the one candidate weight of its shape when that shape is
unique among what is left on both sides; where it is not, nothing is guessed and the note says so.

The decision and its wording are the judge's: the candidate only says its own state's names and shapes (a lie only
costs it the weights) and is then sent which of the reference's weights go to which of its names.
"""

from collections import defaultdict
from dataclasses import dataclass, field


@dataclass
class WeightMapping:
    by_name: list[str] = field(default_factory=list)
    by_shape: dict[str, str] = field(default_factory=dict)  # candidate name -> reference name
    ambiguous: list[tuple[tuple, list[str], list[str]]] = field(default_factory=list)  # shape, reference, candidate

    def pairs(self) -> dict[str, str]:
        """candidate name -> reference name, for every weight given."""
        return {**{name: name for name in self.by_name}, **self.by_shape}

    def notes(self, offered: int) -> list[str]:
        given = len(self.by_name) + len(self.by_shape)
        how = "same names and shapes" if not self.by_shape else \
            f"{len(self.by_name)} by name, {len(self.by_shape)} by unique shape: " + ", ".join(
                f"{own} <- {reference}" for own, reference in sorted(self.by_shape.items()))
        notes = [f"candidate given {given} of {offered} reference weights" + (f" ({how})" if given else "")]
        for shape, reference, own in self.ambiguous:
            notes.append(f"weights not mapped, ambiguous: the reference's {', '.join(reference)} and the candidate's "
                         f"{', '.join(own)} share the shape {tuple(shape)}; the candidate keeps its own values")
        return notes


def map_weights(own: dict[str, tuple], offered: dict[str, tuple]) -> WeightMapping:
    """own, offered: name -> shape (the candidate's state and the reference's)."""
    mapping = WeightMapping(by_name=[name for name, shape in offered.items() if own.get(name) == shape])
    left_own = _by_shape({name: shape for name, shape in own.items() if name not in mapping.by_name})
    left_offered = _by_shape({name: shape for name, shape in offered.items() if name not in mapping.by_name})
    for shape, reference in left_offered.items():
        candidates = left_own.get(shape, [])
        if len(reference) == 1 and len(candidates) == 1:
            mapping.by_shape[candidates[0]] = reference[0]
        elif candidates:
            mapping.ambiguous.append((shape, reference, candidates))
    return mapping


def _by_shape(shapes: dict[str, tuple]) -> dict[tuple, list[str]]:
    grouped = defaultdict(list)
    for name, shape in shapes.items():
        grouped[tuple(shape)].append(name)
    return grouped


def give_weights(run, problem, loaded: dict) -> list[str]:
    """The judge's mapping of the reference's weights onto the state the candidate said it has (`loaded`, its load
    reply), sent to it; the notes that say what it was given."""
    offered = problem.weight_shapes
    if not offered:
        return []
    if "state" not in loaded:
        why = loaded.get("state_refused") or "it did not say its state's names and shapes"
        return [f"could not give the candidate the reference's weights: {why}"]
    mapping = map_weights({name: tuple(shape) for name, shape in loaded["state"].items()}, offered)
    if mapping.pairs():
        reply, _ = run.exchange({"op": "weights", "pairs": mapping.pairs()})
        if not reply.get("given"):
            why = reply.get("state_refused") or "it did not take them"
            return [f"could not give the candidate the reference's weights: {why}"]
    return mapping.notes(len(offered))
