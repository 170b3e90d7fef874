"""The CHORES test double is as strict as ai2thor 5.0's Controller where CHORES touches it,
so CHORES tests cannot pass only because the double is lenient."""

from __future__ import annotations

import inspect

import pytest

from cl_suites.envs.chores.actions import ACTIONS, thor_action
from tests.helpers.chores_double import BASIN, CUP, FRIDGE, TOWEL, FakeThorController


@pytest.fixture
def kitchen():
    return FakeThorController(scene="FloorPlan19", width=64, height=64, quality="High")


def test_constructor_takes_only_controller_and_initialization_arguments():
    pytest.importorskip("ai2thor")
    from ai2thor.controller import Controller

    real = set(inspect.signature(Controller.__init__).parameters) - {"self"}
    real -= {"unity_initialization_parameters"}
    from tests.helpers.chores_double import CONTROLLER_KWARGS

    assert real == CONTROLLER_KWARGS  # the double knows exactly the real constructor's names
    with pytest.raises(ValueError, match=r"unknown Controller arguments \['gridsize'\]"):
        FakeThorController(gridsize=0.25)
    with pytest.raises(ValueError, match="Quality Best is invalid"):
        FakeThorController(quality="Best")
    with pytest.raises(ValueError, match="not contained in build"):
        FakeThorController().reset(scene="Kitchen19")


def test_misspelled_or_missing_arguments_are_rejected_like_ai2thor(kitchen):
    with pytest.raises(ValueError, match=r"InvalidArgument: MoveAhead .*\['moveMagnitud'\]"):
        kitchen.step(action="MoveAhead", moveMagnitud=0.25)
    with pytest.raises(ValueError, match=r"InvalidArgument: TeleportFull .*\['rotateOnTeleport'\]"):
        kitchen.step(
            action="TeleportFull", x=0, y=0.9, z=0, rotation=0, horizon=30, standing=True,
            rotateOnTeleport=True,
        )  # fmt: skip
    with pytest.raises(ValueError, match=r"MissingArguments: TeleportFull needs \['standing'\]"):
        kitchen.step(action="TeleportFull", x=0, y=0.9, z=0, rotation=0, horizon=30)
    with pytest.raises(ValueError, match="Invalid action: Jump"):
        kitchen.step(action="Jump")
    with pytest.raises(ValueError, match=r"MissingArguments: PickupObject needs \['objectId'\]"):
        kitchen.step(action="PickupObject")


def test_every_chores_action_uses_argument_names_the_double_accepts(kitchen):
    for name in ACTIONS:  # no ValueError: the env's calls are well-formed
        kitchen.step(**thor_action(name, CUP))


def test_unknown_object_id_is_a_failed_action_not_an_exception(kitchen):
    event = kitchen.step(action="PickupObject", objectId="Mug|1|2|3")
    assert not event.metadata["lastActionSuccess"]
    assert event.metadata["errorMessage"] == "Object ID appears to be invalid."


def test_interactions_need_visibility_and_reach_unless_forced(kitchen):
    # the agent stands at z=0 facing +z; the cup is 1.0 m ahead, the fridge 2.25 m
    assert not kitchen.step(action="OpenObject", objectId=FRIDGE).metadata["lastActionSuccess"]
    assert kitchen.step(action="OpenObject", objectId=FRIDGE, forceAction=True).metadata[
        "lastActionSuccess"
    ]
    kitchen.step(action="RotateRight", degrees=180)  # the cup is now behind the agent
    assert not kitchen.step(action="PickupObject", objectId=CUP).metadata["lastActionSuccess"]
    kitchen.step(action="RotateLeft", degrees=180)
    assert kitchen.step(action="PickupObject", objectId=CUP).metadata["lastActionSuccess"]


def test_closed_receptacles_block_put_and_hide_their_contents(kitchen):
    for _ in range(4):
        kitchen.step(action="MoveAhead")
    kitchen.step(action="PickupObject", objectId=CUP)
    event = kitchen.step(action="PutObject", objectId=FRIDGE, forceAction=True)
    assert not event.metadata["lastActionSuccess"] and "CLOSED" in event.metadata["errorMessage"]
    kitchen.step(action="OpenObject", objectId=FRIDGE)
    assert kitchen.step(action="PutObject", objectId=FRIDGE).metadata["lastActionSuccess"]
    kitchen.step(action="CloseObject", objectId=FRIDGE)
    assert not kitchen.step(action="PickupObject", objectId=CUP).metadata["lastActionSuccess"]
    kitchen.step(action="OpenObject", objectId=FRIDGE)
    assert kitchen.step(action="PickupObject", objectId=CUP).metadata["lastActionSuccess"]


def test_look_limits_are_thirty_up_and_sixty_down():
    bathroom = FakeThorController(scene="FloorPlan402")
    results = [bathroom.step(action="LookDown", degrees=15) for _ in range(5)]
    assert [e.metadata["lastActionSuccess"] for e in results] == [True] * 4 + [False]
    assert bathroom.last_event.metadata["agent"]["cameraHorizon"] == 60
    for _ in range(6):
        bathroom.step(action="LookUp", degrees=15)
    assert bathroom.last_event.metadata["agent"]["cameraHorizon"] == -30
    assert not bathroom.step(action="LookUp", degrees=15).metadata["lastActionSuccess"]
    pose = {"x": 0, "y": 0.9, "z": 0, "rotation": 0, "standing": True}
    event = bathroom.step(action="TeleportFull", horizon=75, **pose)
    assert not event.metadata["lastActionSuccess"]
    assert bathroom.step(action="TeleportFull", horizon=75, forceAction=True, **pose).metadata[
        "lastActionSuccess"
    ]
    assert {TOWEL, BASIN} == {o["objectId"] for o in bathroom.objects}
