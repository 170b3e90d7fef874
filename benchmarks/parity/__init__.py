"""Parity with reference code: CORA's and MEAL's trainers and the plasticity references."""
