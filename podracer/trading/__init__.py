"""Stock trading: market data, the trading environment and the portfolio's metrics."""
