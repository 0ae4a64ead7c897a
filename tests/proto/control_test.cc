// PLACEHOLDER: not written yet
