"""Report tools: the report beside an earlier commit's, its screenshots."""
