"""The pipeline model (docs/model.md): the evidence it is fitted to (evidence, figures), the
DataLoader's protocol simulated over whole epochs (simulation), crowded cores (crowding), the
fitted pipeline and what it predicts for any config (fitted, model), and `loadtune predict`:
what another machine should use (predict, its values in predict_values, its memory in
predict_memory). Offline."""
