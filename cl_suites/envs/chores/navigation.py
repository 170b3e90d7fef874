"""Shortest-path distances on AI2-THOR's navigation grid (for ALFRED's GotoLocation reward).

Poses are ALFRED's discrete poses ``(x, z, rotation, horizon)``: grid cells of 0.25 m,
rotation in quarter turns (0 faces +z, 1 faces +x), horizon in degrees. The distance of a
pose to a target is the number of CHORES actions on a shortest path: 90-degree turns and
0.25 m moves through reachable cells, plus one 15-degree look per horizon step.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping

GRID_SIZE = 0.25
HORIZON_STEP = 15
_FORWARD = {0: (0, 1), 1: (1, 0), 2: (0, -1), 3: (-1, 0)}

Pose = tuple[int, int, int, int]


def discrete_pose(agent: Mapping) -> Pose:
    """ALFRED's discrete pose of ``metadata["agent"]`` (ai2thor's ``Event.pose_discrete``)."""
    pos = agent["position"]
    return (
        int(pos["x"] / GRID_SIZE),
        int(pos["z"] / GRID_SIZE),
        int(agent["rotation"]["y"] / 90.0) % 4,
        int(round(agent["cameraHorizon"])),  # noqa: RUF046 (numpy floats round to float)
    )


def parse_location(location: str) -> Pose:
    """The target pose of a GotoLocation subgoal (``"loc|x|z|rotation|horizon"``)."""
    x, z, rot, horizon = (int(v) for v in location.split("|")[1:5])
    return (x, z, rot % 4, horizon)


class NavGrid:
    """Breadth-first distances over the reachable cells of one scene.

    Args:
        reachable: reachable positions as dicts with ``x``/``z`` in metres (ai2thor's
            ``GetReachablePositions``) or as ``(cell_x, cell_z)`` tuples.
    """

    def __init__(self, reachable: Iterable):
        cells = set()
        for p in reachable:
            if isinstance(p, Mapping):
                cells.add((round(p["x"] / GRID_SIZE), round(p["z"] / GRID_SIZE)))
            else:
                cells.add((int(p[0]), int(p[1])))
        self.cells = frozenset(cells)
        self._tables: dict[tuple[int, int, int], dict[tuple[int, int, int], int]] = {}

    def _table(self, goal: tuple[int, int, int]) -> dict[tuple[int, int, int], int]:
        """Distances of every (x, z, rotation) to ``goal``, by BFS over reversed moves."""
        if goal not in self._tables:
            dist = {goal: 0}
            queue = deque([goal])
            while queue:
                x, z, r = node = queue.popleft()
                dx, dz = _FORWARD[r]
                preds = [(x, z, (r + 1) % 4), (x, z, (r - 1) % 4)]
                if (x - dx, z - dz) in self.cells:  # a move ahead from there lands here
                    preds.append((x - dx, z - dz, r))
                for p in preds:
                    if p not in dist:
                        dist[p] = dist[node] + 1
                        queue.append(p)
            self._tables[goal] = dist
        return self._tables[goal]

    def distance(self, pose: Pose, target: Pose) -> int | None:
        """Actions from ``pose`` to ``target``; ``None`` when no path exists."""
        planar = self._table(target[:3]).get(pose[:3])
        if planar is None:
            return None
        return planar + abs(target[3] - pose[3]) // HORIZON_STEP
