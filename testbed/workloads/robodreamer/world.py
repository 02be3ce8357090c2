"""The grid world of the RoboDreamer miniature: scenes, the instruction grammar, its parser, the checker.

A scene is a ``grid x grid`` table with one one-pixel block of each colour. An instruction from the
grammar ``<clause> and <clause>``, each clause ``<verb> the <colour> block to the <direction>``
("push the red block to the left and slide the blue block to the top"), asks for a video in which
each named block slides one cell per frame for ``frames`` frames while the others stay put. The
parser splits an instruction into its clauses, the lower-level primitives that RoboDreamer composes
(the paper's constituency parser plus rules, Sec. 3.1). The checker is the programmatic stand-in
for the paper's 0/1 human judgement of task success.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch

COLOURS = ("red", "green", "blue", "yellow")
RGB = np.array([[1, -1, -1], [-1, 1, -1], [-1, -1, 1], [1, 1, -1]], dtype=np.float32)  # pixel values in [-1, 1]
BACKGROUND = -1.0
DIRECTIONS = ("left", "right", "top", "bottom")
STEP = np.array([[0, -1], [0, 1], [-1, 0], [1, 0]])  # (row, column) move of each direction per frame
VERBS = ("push", "move", "slide")
VOCABULARY = ("<pad>", "the", "block", "to", "and", *VERBS, *COLOURS, *DIRECTIONS)
TOKEN = {word: index for index, word in enumerate(VOCABULARY)}


Clause = tuple[int, int, int]  # (verb, colour, direction) indices


def clause_text(verb: int, colour: int, direction: int) -> str:
    """One clause of the grammar, e.g. "push the red block to the left"."""
    return f"{VERBS[verb]} the {COLOURS[colour]} block to the {DIRECTIONS[direction]}"


def instruction(clauses: list[Clause]) -> str:
    """The sentence of the grammar for a list of clauses."""
    return " and ".join(clause_text(*clause) for clause in clauses)


def parse(sentence: str) -> list[str]:
    """Split an instruction into its clauses (rules over the grammar: conjunctions separate primitives)."""
    clauses = sentence.split(" and ")
    for clause in clauses:
        words = clause.split()
        if len(words) != 7 or words[0] not in VERBS or words[2] not in COLOURS or words[6] not in DIRECTIONS:
            raise ValueError(f"not an instruction of the grammar: {sentence!r}")
    return clauses


def tokens(phrases: list[str], length: int) -> torch.Tensor:
    """Token ids of each phrase, right-padded with ``<pad>`` (0) to ``length``: ``[len(phrases), length]``."""
    ids = torch.zeros(len(phrases), length, dtype=torch.long)
    for row, phrase in enumerate(phrases):
        words = phrase.split()
        ids[row, : len(words)] = torch.tensor([TOKEN[w] for w in words])
    return ids


def combinations() -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Every pair of (colour, direction) moves of two different blocks, the lower colour first."""
    moves = [(c, d) for c in range(len(COLOURS)) for d in range(len(DIRECTIONS))]
    return [(m, n) for m, n in itertools.product(moves, moves) if m[0] < n[0]]


def held_out_combinations(share: float, rng: np.random.Generator) -> set[tuple[tuple[int, int], tuple[int, int]]]:
    """A random ``share`` of the combinations, drawn again until every single move is still seen in training."""
    combos = combinations()
    while True:
        chosen = rng.choice(len(combos), size=int(round(share * len(combos))), replace=False)
        held = {combos[i] for i in chosen}
        seen_moves = {move for combo in combos if combo not in held for move in combo}
        if len(seen_moves) == len(COLOURS) * len(DIRECTIONS):
            return held


def sample_layout(moves: list[tuple[int, int]], grid: int, frames: int, rng: np.random.Generator) -> np.ndarray:
    """Start cells ``[colours, 2]`` such that each moved block can slide ``frames`` cells without meeting another."""
    taken: set[tuple]
    while True:
        cells, taken, ok = np.empty((len(COLOURS), 2), dtype=np.int64), set(), True
        for colour, direction in moves:
            step = STEP[direction]
            cells[colour] = rng.integers(np.maximum(0, -step * frames), grid - np.maximum(0, step * frames))
            path = {tuple(cells[colour] + step * k) for k in range(frames + 1)}
            ok = ok and not (path & taken)
            taken |= path
        moved = {colour for colour, _ in moves}
        for other in (c for c in range(len(COLOURS)) if c not in moved):
            cells[other] = rng.integers(0, grid, 2)
            ok = ok and tuple(cells[other]) not in taken
            taken.add(tuple(cells[other]))
        if ok:
            return cells


def render(cells: np.ndarray, grid: int) -> np.ndarray:
    """One frame ``[3, grid, grid]`` with each block drawn at its cell."""
    frame = np.full((3, grid, grid), BACKGROUND, dtype=np.float32)
    for colour, (row, column) in enumerate(cells):
        frame[:, row, column] = RGB[colour]
    return frame


def final_cells(cells: np.ndarray, moves: list[tuple[int, int]], shift: int) -> np.ndarray:
    """The cells after each moved block has slid ``shift`` cells."""
    moved = cells.copy()
    for colour, direction in moves:
        moved[colour] = cells[colour] + STEP[direction] * shift
    return moved


def video(cells: np.ndarray, moves: list[tuple[int, int]], frames: int, grid: int) -> np.ndarray:
    """The ground-truth video ``[frames + 1, 3, grid, grid]``: the first frame, then one cell per frame."""
    return np.stack([render(final_cells(cells, moves, k), grid) for k in range(frames + 1)])


def locate(frame: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each colour, the cell whose pixel is nearest to it, and that pixel's distance to the colour."""
    pixels = frame.reshape(3, -1).T  # [cells, 3]
    distance = np.linalg.norm(pixels[None, :, :] - RGB[:, None, :], axis=2)  # [colours, cells]
    best = distance.argmin(1)
    grid = frame.shape[-1]
    return np.stack([best // grid, best % grid], 1), distance[np.arange(len(RGB)), best]


def succeeded(generated: np.ndarray, cells: np.ndarray, moves: list[tuple[int, int]], tolerance: float = 1.0) -> bool:
    """Task success of a generated video ``[frames, 3, grid, grid]`` (the frames after the first).

    Every named block is drawn at its target cell in the last frame, and every other block is
    drawn where it started; a block counts as drawn when some pixel is within ``tolerance`` of its colour.
    """
    where, distance = locate(generated[-1])
    target = final_cells(cells, moves, generated.shape[0])
    return bool((where == target).all() and (distance <= tolerance).all())
