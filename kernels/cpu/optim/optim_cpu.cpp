// placeholder: filled in by the optimizer work
