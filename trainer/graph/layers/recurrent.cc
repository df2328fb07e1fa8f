// Placeholder: this family's layers land in their own commit.
